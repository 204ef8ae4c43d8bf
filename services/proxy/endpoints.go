package proxy

// The proxy's inference endpoints: one per route, with the caller's wire
// format and operation (the kinds of model each serves: kindServes, in
// accept.go).

import (
	"switchyard.dev/shared/provider"
)

// endpoint is one of the proxy's inference routes.
type endpoint struct {
	name   string
	path   string
	format provider.Format // the caller's wire format
	op     provider.Op
}

var (
	epChat       = &endpoint{name: "chat.completions", path: "/v1/chat/completions", format: provider.FormatOpenAI, op: provider.OpChat}
	epMessages   = &endpoint{name: "messages", path: "/v1/messages", format: provider.FormatAnthropic, op: provider.OpChat}
	epEmbeddings = &endpoint{name: "embeddings", path: "/v1/embeddings", format: provider.FormatOpenAI, op: provider.OpEmbeddings}
	// OpenAI's legacy completions, moderations and image generations, and
	// Anthropic's token counting: served natively by providers of their
	// format (no translation).
	epCompletions = &endpoint{name: "completions", path: "/v1/completions", format: provider.FormatOpenAI, op: provider.OpCompletions}
	epModerations = &endpoint{name: "moderations", path: "/v1/moderations", format: provider.FormatOpenAI, op: provider.OpModerations}
	epImages      = &endpoint{name: "images.generations", path: "/v1/images/generations", format: provider.FormatOpenAI, op: provider.OpImages}
	epCountTokens = &endpoint{name: "messages.count_tokens", path: "/v1/messages/count_tokens", format: provider.FormatAnthropic, op: provider.OpCountTokens}
	// The Responses API, served natively by the providers that have it.
	epResponses = &endpoint{name: "responses", path: "/v1/responses", format: provider.FormatResponses, op: provider.OpResponses}
	// Audio: speech answers binary audio, transcriptions take a form.
	epSpeech         = &endpoint{name: "audio.speech", path: "/v1/audio/speech", format: provider.FormatOpenAI, op: provider.OpSpeech}
	epTranscriptions = &endpoint{name: "audio.transcriptions", path: "/v1/audio/transcriptions", format: provider.FormatOpenAI, op: provider.OpTranscriptions}

	// endpoints are the inference routes, by name.
	endpoints = []*endpoint{epChat, epMessages, epEmbeddings, epCompletions, epModerations, epImages, epCountTokens, epResponses,
		epSpeech, epTranscriptions}
)

package proxy

// The proxy's inference endpoints (one per route, with the caller's wire
// format and operation) and the model kinds each serves: the refusal of a
// request sent to a model of another kind, with a hint of where to send it.

import (
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
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

// wrongKind reports whether some step of a model can serve op: a chat
// request to an embedding model (or the reverse) is refused before any
// upstream call. Steps of unknown kind are given the benefit of the doubt.
func wrongKind(steps []route.Step, op provider.Op) (kind string, ok bool) {
	for i := range steps {
		if k := steps[i].Kind; k == "" || kindServes(k, op) {
			return "", true
		}
		kind = steps[i].Kind
	}
	return kind, len(steps) == 0
}

// kindServes reports whether a model of kind serves op: legacy completions
// on completion and chat models (OpenAI-compatible servers complete with
// their chat models), token counts on chat models.
func kindServes(kind string, op provider.Op) bool {
	switch op {
	case provider.OpEmbeddings:
		return kind == config.KindEmbedding
	case provider.OpCompletions:
		return kind == config.KindCompletion || kind == config.KindChat
	case provider.OpModerations:
		return kind == config.KindModeration
	case provider.OpImages:
		return kind == config.KindImage
	case provider.OpSpeech:
		return kind == config.KindSpeech
	case provider.OpTranscriptions:
		return kind == config.KindTranscript
	}
	return kind == config.KindChat
}

func kindHint(kind string) string {
	switch kind {
	case config.KindEmbedding:
		return "an embedding model: use POST /v1/embeddings"
	case config.KindCompletion:
		return "a completion model: use POST /v1/completions"
	case config.KindModeration:
		return "a moderation model: use POST /v1/moderations"
	case config.KindImage:
		return "an image model: use POST /v1/images/generations"
	case config.KindSpeech:
		return "a speech model: use POST /v1/audio/speech"
	case config.KindTranscript:
		return "a transcription model: use POST /v1/audio/transcriptions"
	}
	return "a chat model: use POST /v1/chat/completions or /v1/messages"
}

package proxy

import (
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/services/proxy/internal/translate"
	"switchyard.dev/shared/provider"
)

// The Responses API for providers that do not serve it: the request and
// answer converters are translate's (internal/translate/responses.go).

// responsesBody is a Responses request's body for a provider without the
// Responses API: a chat request (OpenAI format), or a messages request
// (Anthropic), built once per format for the request.
func (r *request) responsesBody(step *route.Step) ([]byte, error) {
	return r.translatedFor(step, func() ([]byte, error) {
		chat, err := translate.ResponsesToChat(r.body, step.Upstream, r.stream)
		if err == nil && step.Provider.Adapter.Format() == provider.FormatAnthropic {
			chat, err = translate.ChatToMessages(chat, step.Upstream)
		}
		return chat, err
	})
}

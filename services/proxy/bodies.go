package proxy

// The request body sent for each step: the caller's own with the model
// renamed and stream_options fixed for the provider, or a translation into
// the provider's format, built once per format for the request.

import (
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/services/proxy/internal/translate"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/provider"
)

// bodyFor returns the request body for a step: the caller's body with the
// model renamed, or translated into the provider's format.
func (r *request) bodyFor(step *route.Step) ([]byte, error) {
	a := step.Provider.Adapter
	pf := a.Format()
	if r.ep.op == provider.OpResponses && !a.Supports(provider.OpResponses) {
		return r.responsesBody(step)
	}
	if pf == r.ep.format || r.ep.op != provider.OpChat { // only chat translates; Supports kept the others to their format
		body := r.body
		var buf [2]jsonfield.Edit
		edits := buf[:0]
		if r.stream && pf == provider.FormatOpenAI && (r.ep.op == provider.OpChat || r.ep.op == provider.OpCompletions) {
			body, edits = streamOptionsFor(a, body, edits, r.use.callerUsage)
		}
		if step.Upstream != r.model {
			if r.ep.op == provider.OpTranscriptions {
				return formWithModel(body, r.contentType, step.Upstream)
			}
			edits = append(edits, jsonfield.EditString("model", step.Upstream))
		}
		if len(edits) == 0 {
			return body, nil
		}
		// One walk and one copy for both edits.
		return jsonfield.Rewrite(make([]byte, 0, len(body)+len(step.Upstream)+len(streamUsageField)), body, edits...), nil
	}
	return r.translatedFor(step, func() ([]byte, error) { return translate.Request(r.ep.format, r.body, step.Upstream) })
}

// translatedFor is the request translated into step's provider format,
// built by build once per format for the request, with step's model
// name (the translation carries the first translated step's), no
// stream_options where the provider rejects them, and max_tokens named
// max_completion_tokens where the provider wants that (withMaxCompletionTokens).
func (r *request) translatedFor(step *route.Step, build func() ([]byte, error)) ([]byte, error) {
	a := step.Provider.Adapter
	pf := a.Format()
	if r.trans.bodies[pf] == nil && r.trans.errs[pf] == nil {
		r.trans.bodies[pf], r.trans.errs[pf] = build()
	}
	if r.trans.errs[pf] != nil {
		return nil, r.trans.errs[pf]
	}
	body := jsonfield.SetString(nil, r.trans.bodies[pf], "model", step.Upstream)
	if r.stream && a.RejectsStreamOptions() {
		body = jsonfield.Delete(nil, body, "stream_options")
	}
	if a.TakesMaxCompletionTokens() {
		body = withMaxCompletionTokens(body)
	}
	return body, nil
}

// streamOptionsFor is what an OpenAI-format stream request's body needs
// for a provider: one that refuses stream_options (Mistral, which reports
// usage anyway) gets none (the body is copied without them); one that
// reports a stream's usage only when asked gets stream_options.include_usage
// unless the caller asked already (an edit appended to edits, for the
// caller's Rewrite; the relay then keeps the usage chunk from a caller that
// did not ask).
func streamOptionsFor(a *provider.Adapter, body []byte, edits []jsonfield.Edit, callerAsked bool) ([]byte, []jsonfield.Edit) {
	switch {
	case a.RejectsStreamOptions():
		if _, _, _, ok := jsonfield.Find(body, "stream_options"); ok {
			return jsonfield.Delete(make([]byte, 0, len(body)), body, "stream_options"), edits
		}
	case a.StreamUsageOption() && !callerAsked:
		return body, append(edits, streamUsageEdit)
	}
	return body, edits
}

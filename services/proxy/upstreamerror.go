package proxy

// What a failed attempt becomes: its classification (fail: the provider's
// own code and type first, the status last), the proxy's next move
// (decide), and the upstream's error given to the caller in the
// endpoint's format with every key the provider might echo masked
// (returnUpstreamError).

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/services/proxy/internal/translate"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/redact"
)

// attemptError is one failed attempt.
type attemptError struct {
	t      target
	status int // 0 for transport errors
	header http.Header
	body   []byte
	stream bool
	err    error
	result failure.Result
}

func (e *attemptError) reason() string {
	if e.result.Reason != "" {
		return redact.String(e.result.Reason)
	}
	if e.err != nil {
		return e.err.Error()
	}
	return http.StatusText(e.status)
}

// summary names the target by provider, key id and model (never the
// secret) with what went wrong, masked for anything credential-shaped.
func (e *attemptError) summary() string {
	return maskAddrs(redact.String(e.rawSummary()))
}

// addrRE matches network addresses in an error's text (Go's "read tcp
// 10.0.0.7:51234->10.0.3.9:443: connection reset by peer", "lookup x on
// 10.0.0.2:53"): IPv4 with its port, bracketed IPv6.
var addrRE = regexp.MustCompile(`\b(?:\d{1,3}\.){3}\d{1,3}:\d+\b|\[[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[0-9A-Za-z]+)?\](?::\d+)?`)

// maskAddrs replaces the network addresses in text a caller is given: the
// gateway's and its upstreams' internal addresses are the operator's
// (the logs keep them).
func maskAddrs(s string) string {
	if !strings.ContainsAny(s, ".[") {
		return s
	}
	return addrRE.ReplaceAllString(s, "[address]")
}

func (e *attemptError) rawSummary() string {
	s := fmt.Sprintf("%s/%s key %s: ", e.t.step.Provider.Name, e.t.step.Model, e.t.key.ID)
	if e.status != 0 {
		s += fmt.Sprintf("HTTP %d ", e.status)
	}
	s += e.result.Class.String()
	if e.result.Code != "" {
		s += " (" + e.result.Code + ")"
	}
	if e.err != nil && e.status == 0 {
		s += ": " + e.err.Error()
	}
	return s
}

// fail classifies a failed attempt.
func (r *request) fail(t target, ae *attemptError) attemptResult {
	ae.t = t
	ae.result = r.rt.classifier.Classify(failure.Input{
		Provider: t.step.Provider.Adapter.Type(),
		Status:   ae.status,
		Header:   ae.header,
		Body:     ae.body,
		Stream:   ae.stream,
		Err:      ae.err,
	}, t.step.Provider.Name)
	// The reason travels into hold records, events and logs: the
	// provider's own secrets are masked by value (shapes are masked where
	// those are written).
	if ae.result.Reason != "" {
		ae.result.Reason = string(redact.Text([]byte(ae.result.Reason), providerSecrets(t.step.Provider)...))
	}
	if ae.status == 0 && !ae.stream && ae.result.Class != failure.Transient {
		ae.result.Class = failure.Transient // a transport error says nothing about the target
	}
	if errors.Is(ae.err, fasthttp.ErrBodyTooLarge) {
		// The target answered; the answer is too large for the gateway to
		// hold (upstream.MaxResponseBytes). Another target would answer as
		// much: the caller gets it at once, and the target is not blamed.
		ae.result = failure.Result{Class: failure.RequestRejected, Code: codeResponseTooLarge, Reason: "answer larger than the gateway holds"}
	}
	return attemptResult{failure: ae}
}

// decide maps a failure to the proxy's next move: a transport error per
// retry.on_transport_errors (a timeout always rotates), then the operator's retry.on_statuses and
// retry.rotate_on_statuses (a class that no backoff fixes is never retried
// in place), then the class's action (failure.Meaning).
func (s *Service) decide(ae *attemptError) failure.Action {
	return ae.result.ActionFor(ae.status, ae.stream, s.cfg.Retry.Policy())
}

// returnUpstreamError gives the caller the upstream's own error, in the
// endpoint's format.
func (r *request) returnUpstreamError(c *fiber.Ctx, t target, ae *attemptError) error {
	r.setServedBy(c, t)
	status := ae.status
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
		if ae.result.Class == failure.RequestRejected && ae.result.Code != codeResponseTooLarge {
			status = http.StatusBadRequest // an error event refusing the request
		}
	}
	// Providers echo keys: the upstream's body is masked before anything
	// else (a translation may cut a long message, and a secret cut in two
	// is no longer recognisable), the gateway's summary of it as it is
	// made.
	secrets := providerSecrets(t.step.Provider)
	body := redact.Body(ae.body, secrets...)
	if len(body) == 0 || !jsonObject(body) {
		body = withRequestID(c, r.ep.format, redact.Body(errorBody(r.ep.format, status, gwerror.ProviderError, "upstream error: "+ae.summary()), secrets...))
	} else if up := r.upFormat(t.step.Provider.Adapter); errorShape(up) != errorShape(r.ep.format) {
		body = withRequestID(c, r.ep.format, translateError(r.ep.format, status, body)) // Anthropic's own carry Anthropic's
	} else if errorShape(r.ep.format) == provider.FormatOpenAI {
		// OpenAI-compatible providers (and the Responses API's error
		// events) spell errors more loosely than OpenAI's SDKs read them:
		// the caller would get the status without the message.
		body = translate.CanonicalOpenAIError(status, body)
	}
	r.class = ae.result.Class.String()
	r.logInfo("request rejected upstream", t, slog.Int("status", status), slog.String("class", r.class))
	c.Status(status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(body)
}

// providerSecrets returns the secrets of a provider's keys, current and
// rotated away (route.Key.AppendSecrets): what the provider might echo
// back in an error.
func providerSecrets(p *route.Provider) []string {
	out := make([]string, 0, len(p.Keys))
	for _, k := range p.Keys {
		out = k.AppendSecrets(out)
	}
	return out
}

func jsonObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 1 && (b[0] == '{' || b[0] == '[')
}

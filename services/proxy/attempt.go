package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/route"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/provider"
)

// maxResponseBytes bounds a non-stream upstream response held in memory.
const maxResponseBytes = 64 << 20

// target is what one attempt is sent to.
type target struct {
	step *route.Step
	key  *route.Key
}

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
		return e.result.Reason
	}
	if e.err != nil {
		return e.err.Error()
	}
	return http.StatusText(e.status)
}

// summary names the target by provider, key id and model (never the
// secret) with what went wrong.
func (e *attemptError) summary() string {
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

// attemptResult is the result of one attempt: done (a response was
// written or a relay prepared) or a failure to act on.
type attemptResult struct {
	done    bool
	outcome outcome
	failure *attemptError
}

// attempt sends one request to one target.
func (r *request) attempt(c *fiber.Ctx, t target, body []byte, withIdem bool) attemptResult {
	s := r.s
	a := t.step.Provider.Adapter
	up := s.upstreams[t.step.Provider.Index]

	ctx, cancel := context.WithCancel(r.ctx)
	// The attempt timeout bounds the wait for the response (and, for a
	// stream, its first event); a stream then runs on its idle timeout.
	timeout := up.attemptTimeout
	timer := time.AfterFunc(timeout, cancel)

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL(r.ep.op, t.step.Upstream), bytes.NewReader(body))
	if err != nil {
		timer.Stop()
		cancel()
		return r.fail(t, &attemptError{err: err})
	}
	h := req.Header
	h["Content-Type"] = []string{"application/json"}
	if r.stream {
		h["Accept"] = []string{"text/event-stream"}
	} else {
		h["Accept"] = []string{"application/json"}
	}
	h["User-Agent"] = []string{userAgent}
	h["X-Request-Id"] = []string{r.id}
	if withIdem && r.idemKey != "" {
		h["Idempotency-Key"] = []string{r.idemKey}
	}
	if a.Format() == provider.FormatAnthropic && r.ep.format == provider.FormatAnthropic {
		for _, name := range [...]string{"Anthropic-Version", "Anthropic-Beta"} {
			if v := c.Get(name); v != "" {
				h[name] = []string{v}
			}
		}
	}
	a.Authorize(h, t.key.Secret())

	resp, err := up.client.Do(req)
	if err != nil {
		timer.Stop()
		cancel()
		if ctx.Err() != nil && r.ctx.Err() == nil {
			err = fmt.Errorf("attempt timed out after %s: %w", timeout, err)
		}
		return r.fail(t, &attemptError{err: err})
	}
	if resp.StatusCode == http.StatusOK && r.stream && isEventStream(resp.Header) {
		return r.startStream(t, resp, cancel, timer)
	}
	respBody, err := readBody(resp.Body)
	timer.Stop()
	cancel()
	if err != nil {
		return r.fail(t, &attemptError{status: 0, err: fmt.Errorf("read response: %w", err)})
	}
	if resp.StatusCode != http.StatusOK {
		return r.fail(t, &attemptError{status: resp.StatusCode, header: resp.Header, body: respBody})
	}
	if status, isErr := provider.ErrorIn200(respBody); isErr {
		return r.fail(t, &attemptError{status: status, header: resp.Header, body: respBody})
	}
	if r.ep.op == provider.OpChat && a.Format() == provider.FormatOpenAI && provider.EmptyChoices(respBody) {
		return r.fail(t, &attemptError{status: http.StatusBadGateway, header: resp.Header, body: respBody,
			err: errors.New("completion with no choices")})
	}
	if r.stream {
		// Asked for a stream, got a plain 200 body: not what was asked.
		return r.fail(t, &attemptError{status: http.StatusBadGateway, header: resp.Header, body: respBody,
			err: fmt.Errorf("expected an event stream, got %q", resp.Header.Get("Content-Type"))})
	}
	out, err := translateResponse(r.ep.format, a.Format(), r.ep.op, respBody, r.model)
	if err != nil {
		return r.fail(t, &attemptError{status: http.StatusBadGateway, body: respBody, err: err})
	}
	r.setServedBy(c, t)
	c.Status(http.StatusOK)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	r.logger().Info("request served", "model", r.model, "provider", t.step.Provider.Name,
		"key_id", t.key.ID, "attempts", r.attempts, "duration", time.Since(r.started))
	return attemptResult{done: true, outcome: outcome{err: c.Send(out)}}
}

// fail classifies a failed attempt.
func (r *request) fail(t target, ae *attemptError) attemptResult {
	ae.t = t
	ae.result = r.s.classifier.Classify(failure.Input{
		Provider: t.step.Provider.Adapter.Type(),
		Status:   ae.status,
		Header:   ae.header,
		Body:     ae.body,
		Stream:   ae.stream,
		Err:      ae.err,
	}, t.step.Provider.Name)
	if ae.status == 0 && !ae.stream && ae.result.Class != failure.Transient {
		ae.result.Class = failure.Transient // a transport error says nothing about the target
	}
	return attemptResult{failure: ae}
}

func (r *request) setServedBy(c *fiber.Ctx, t target) {
	c.Set(headerProvider, t.step.Provider.Name)
	c.Set(headerKeyID, t.key.ID)
	c.Set(headerModel, t.step.Model)
	c.Set(headerAttempts, itoa(r.attempts))
}

// action is what the proxy does after a failed attempt.
type action uint8

const (
	actRetrySame action = iota // same target, after a backoff
	actRotate                  // next key, then next step
	actReturn                  // give the upstream's answer to the caller
)

func (a action) String() string {
	switch a {
	case actRetrySame:
		return "retry_same"
	case actRotate:
		return "rotate"
	}
	return "return"
}

// decide maps a failure to an action: the configured retry lists first
// (retry.on_transport_errors, retry.on_statuses, retry.rotate_on_statuses),
// then the class.
func (s *Service) decide(ae *attemptError) action {
	rc := &s.cfg.Retry
	switch {
	case ae.status == 0 && !ae.stream:
		if rc.OnTransportErrors {
			return actRetrySame
		}
		return actRotate
	case ae.result.Class == failure.QuotaExhausted || ae.result.Class == failure.CredentialRejected:
		return actRotate // a 429 insufficient_quota is not retried in place
	case contains(rc.OnStatuses, ae.status):
		return actRetrySame
	case contains(rc.RotateOnStatuses, ae.status):
		return actRotate
	}
	switch ae.result.Class {
	case failure.Transient:
		return actRetrySame
	case failure.RateLimit, failure.ModelNotAccessible, failure.ModelRetired, failure.RegionBlocked:
		return actRotate
	}
	return actReturn
}

// returnUpstreamError gives the caller the upstream's own error, in the
// endpoint's format.
func (r *request) returnUpstreamError(c *fiber.Ctx, t target, ae *attemptError) error {
	r.setServedBy(c, t)
	status := ae.status
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	body := ae.body
	pf := t.step.Provider.Adapter.Format()
	if len(body) == 0 || !jsonObject(body) {
		body = errorBody(r.ep.format, status, codeProviderError, "upstream error: "+ae.summary())
	} else if pf != r.ep.format {
		body = translateError(r.ep.format, status, body)
	}
	r.logger().Info("request rejected upstream", "model", r.model, "provider", t.step.Provider.Name,
		"key_id", t.key.ID, "status", status, "class", ae.result.Class.String())
	c.Status(status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(body)
}

func jsonObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 1 && (b[0] == '{' || b[0] == '[')
}

func isEventStream(h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt == "text/event-stream"
}

func readBody(rc io.ReadCloser) ([]byte, error) {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxResponseBytes+1))
	if err == nil && len(b) > maxResponseBytes {
		err = fmt.Errorf("response larger than %d bytes", maxResponseBytes)
	}
	return b, err
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

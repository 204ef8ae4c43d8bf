package prober

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/provider"
)

// maxCheckBody is how much of an answer a check reads (a models list can be
// large; the rest is discarded).
const maxCheckBody = 4 << 20

// result is what one check came to.
type result struct {
	ok      bool
	status  int // 0: no answer
	latency time.Duration
	body    []byte
	res     failure.Result // when !ok
	err     error          // transport error, if any
	// stale: the key's secret was rotated while the check was out; its
	// answer says nothing about the secret now in use.
	stale bool
}

// request is one check to send.
type request struct {
	method   string
	url      string
	body     []byte
	expected []int
	timeout  time.Duration
}

// send runs one check with key's secret and classifies a failure with the
// same classifier as caller traffic (the routing in use's trip rules).
func (s *Service) send(ctx context.Context, t *target, key config.Key, rq request) (out result) {
	classifier := s.routing().classifier
	ctx, cancel := context.WithTimeout(ctx, rq.timeout)
	defer cancel()
	var body io.Reader
	if len(rq.body) > 0 {
		body = bytes.NewReader(rq.body)
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, rq.url, body)
	if err != nil {
		return result{res: failure.Result{Class: failure.Unrecognised, Code: "bad_check_request", Reason: err.Error()}, err: err}
	}
	if len(rq.body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "switchyard-prober/0.1")
	sent := s.secrets.of(t.name, key).Reveal()
	t.adapter.Authorize(req.Header, sent)
	start := time.Now()
	resp, err := s.client.Do(req)
	defer func() { out.stale = s.secrets.of(t.name, key).Reveal() != sent }()
	if err != nil {
		r := result{latency: time.Since(start), err: err}
		r.res = classifier.Classify(failure.Input{Provider: t.typ, Err: fmt.Errorf("check %s %s: %w", rq.method, t.name, err)}, t.name)
		if r.res.Class != failure.Transient { // our own timeout is the target's fault
			r.res = failure.Result{Class: failure.Transient, Scope: failure.ScopeNone, Code: "timeout", Reason: err.Error()}
		}
		return r
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxCheckBody))
	r := result{status: resp.StatusCode, latency: time.Since(start), body: b}
	if rerr != nil && ctx.Err() != nil {
		r.err = rerr
		r.res = failure.Result{Class: failure.Transient, Code: "timeout", Reason: "reading the answer: " + rerr.Error()}
		return r
	}
	expected := len(rq.expected) == 0 && resp.StatusCode/100 == 2 || slices.Contains(rq.expected, resp.StatusCode)
	if expected {
		// An error behind a 2xx (OpenRouter and some compatible servers) fails
		// a check whose statuses were not configured explicitly.
		if st, isErr := provider.ErrorIn200(b); isErr && len(rq.expected) == 0 && rq.method != http.MethodHead {
			r.res = classifier.Classify(failure.Input{Provider: t.typ, Status: st, Header: resp.Header, Body: b}, t.name)
			return r
		}
		r.ok = true
		return r
	}
	r.res = classifier.Classify(failure.Input{Provider: t.typ, Status: resp.StatusCode, Header: resp.Header, Body: b}, t.name)
	if resp.StatusCode/100 == 2 || resp.StatusCode/100 == 3 {
		// an answer, but not the one configured: says nothing about keys
		r.res = failure.Result{Class: failure.Unrecognised, Code: "unexpected_status",
			Reason: fmt.Sprintf("HTTP %d, expected %v", resp.StatusCode, rq.expected)}
	}
	return r
}

// healthCheck is the provider's configured check.
func (t *target) healthCheck() request {
	return request{method: t.spec.method, url: t.spec.url, body: t.spec.body, expected: t.spec.expected, timeout: t.spec.timeout}
}

// modelsList lists models with a key (the cheap check of credential and
// quota holds, and discovery).
func (t *target) modelsList(timeout time.Duration) request {
	return request{method: http.MethodGet, url: t.adapter.URL(provider.OpModels, ""), timeout: timeout}
}

// modelEntry fetches one model's entry.
func (t *target) modelEntry(model string, timeout time.Duration) request {
	up := t.models[model]
	if up == "" {
		up = model
	}
	return request{method: http.MethodGet, url: modelEntryURL(t.adapter, up), timeout: timeout}
}

// tripCheck is the one-token request of the operation and model a
// breaker was tripped by (hold.Tripped): a trip by the prober's own checks
// gets the check again, a chat (or Responses) trip
// a one-token chat request, a completions trip a one-token completion,
// an embeddings trip the embedding of one word. Other operations have no
// cheap request: ok is false and the trip is left to a caller's request.
func (t *target) tripCheck(tr *hold.Tripped, timeout time.Duration) (request, bool) {
	if !tr.Checkable() {
		return request{}, false
	}
	if tr.Operation == hold.OperationHealthCheck {
		// tripped by the prober's own checks: they tell
		if t.spec.enabled {
			return t.healthCheck(), true
		}
		return t.modelsList(timeout), true
	}
	op, _ := provider.ParseOp(tr.Operation)
	switch {
	case op == provider.OpChat || op == provider.OpResponses:
		return t.oneToken(tr.Model, timeout), true
	case op == provider.OpCompletions:
		return t.small(provider.OpCompletions, tr.Model, map[string]any{"prompt": "ping", "max_tokens": 1}, timeout), true
	case op == provider.OpEmbeddings:
		return t.small(provider.OpEmbeddings, tr.Model, map[string]any{"input": "ping"}, timeout), true
	}
	return request{}, false
}

// small is a POST of body (with the model's upstream name) to op's URL.
func (t *target) small(op provider.Op, model string, body map[string]any, timeout time.Duration) request {
	up := t.models[model]
	if up == "" {
		up = model
	}
	if !t.adapter.ModelInURL() {
		body["model"] = up
	}
	b, _ := json.Marshal(body)
	return request{method: http.MethodPost, url: t.adapter.URL(op, up), body: b, timeout: timeout}
}

// oneToken is a one-token chat request to model (with
// prober.completion_probes, and for a breaker tripped by chat requests).
func (t *target) oneToken(model string, timeout time.Duration) request {
	return t.small(provider.OpChat, model, map[string]any{
		"max_tokens": 1,
		"messages":   []map[string]string{{"role": "user", "content": "ping"}},
	}, timeout)
}

// parseModels reads the ids of a models list ({"data":[{"id":...}]}, as
// OpenAI, Anthropic and compatible servers answer).
func parseModels(b []byte) ([]string, error) {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("decode models list: %w", err)
	}
	out := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID != "" {
			out = append(out, m.ID)
		}
	}
	slices.Sort(out)
	return out, nil
}

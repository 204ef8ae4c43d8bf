package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicopt "github.com/anthropics/anthropic-sdk-go/v2/option"

	"switchyard.dev/tools/fakeprovider"
)

// TestAnthropicRequestID: answers in Anthropic's format carry the request
// id in request-id too, where Anthropic's SDKs read it (anthropic-sdk-go's
// Error.RequestID), and the gateway's Anthropic error bodies carry it as
// request_id, as Anthropic's do.
func TestAnthropicRequestID(t *testing.T) {
	f := newFixture(t)
	client := anthropicClient(f)
	ctx := context.Background()
	params := func(model string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}
	}
	sameIDs := func(what string, h http.Header) string {
		t.Helper()
		id := h.Get("X-Request-Id")
		if !strings.HasPrefix(id, "req_") || h.Get("Request-Id") != id {
			t.Errorf("%s: x-request-id %q, request-id %q", what, id, h.Get("Request-Id"))
		}
		return id
	}

	// Served, by Anthropic or translated from OpenAI.
	for _, model := range []string{"demo-claude", "fake-openai/demo-model"} {
		var resp *http.Response
		if _, err := client.Messages.New(ctx, params(model), anthropicopt.WithResponseInto(&resp)); err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		sameIDs(model, resp.Header)
	}

	// The gateway's own error, and an OpenAI provider's error translated.
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.bad_request", Times: 1})
	for _, model := range []string{"nope", "fake-openai/demo-model"} {
		_, err := client.Messages.New(ctx, params(model))
		var ae *anthropic.Error
		if !errorsAs(err, &ae) {
			t.Fatalf("%s: %v", model, err)
		}
		id := sameIDs(model, ae.Response.Header)
		var body struct {
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal([]byte(ae.RawJSON()), &body); err != nil || ae.RequestID != id || body.RequestID != id {
			t.Errorf("%s: RequestID %q, body %s, want %q", model, ae.RequestID, ae.RawJSON(), id)
		}
	}

	// A caller's own id is the body's too, escaped.
	status, h, b := f.call(t, "/v1/messages", `{"model":"nope","max_tokens":8,"messages":[]}`, "X-Request-Id", `a"b\c`)
	var body struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(b, &body); err != nil || status != 404 || body.RequestID != `a"b\c` || h.Get("Request-Id") != `a"b\c` {
		t.Errorf("a caller's id: %d %v request-id %q: %s", status, err, h.Get("Request-Id"), b)
	}

	// Without anthropic-version: count_tokens is Anthropic's all the same,
	// a passthrough to an Anthropic provider gets the gateway's id, not
	// the provider's, and an OpenAI endpoint has no request-id.
	for _, tc := range []struct {
		method, path, body string
		want               bool
	}{
		{http.MethodPost, "/v1/messages/count_tokens", `{"model":"demo-claude","messages":[{"role":"user","content":"hi"}]}`, true},
		{http.MethodGet, "/fake-anthropic/v1/models", ``, true},
		{http.MethodPost, "/v1/chat/completions", `{"model":"demo-model","messages":[{"role":"user","content":"hi"}]}`, false},
	} {
		req, _ := http.NewRequest(tc.method, f.url+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+clientSecret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: status %d", tc.path, resp.StatusCode)
		}
		if tc.want {
			sameIDs(tc.path, resp.Header)
		} else if resp.Header.Get("Request-Id") != "" {
			t.Errorf("%s: request-id %q on an OpenAI answer", tc.path, resp.Header.Get("Request-Id"))
		}
	}
}

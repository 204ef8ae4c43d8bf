package debug_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/shared/testkit"
)

func TestDigestOf(t *testing.T) {
	body := []byte(strings.Repeat("x", 3000))
	d := debug.DigestOf(body)
	whole, prefix := sha256.Sum256(body), sha256.Sum256(body[:debug.PrefixBytes])
	if d.Bytes != 3000 || d.SHA256 != hex.EncodeToString(whole[:]) || d.PrefixBytes != debug.PrefixBytes || d.PrefixSHA256 != hex.EncodeToString(prefix[:]) {
		t.Fatalf("digest %+v", d)
	}
	if s := debug.DigestOf([]byte("hi")); s.PrefixBytes != 2 || s.PrefixSHA256 != s.SHA256 {
		t.Fatalf("short body %+v", s)
	}
}

func TestOutcomeOf(t *testing.T) {
	for _, tt := range []struct {
		status int
		cut    bool
		want   string
	}{{200, false, debug.OutcomeOK}, {200, true, debug.OutcomeFailed}, {404, false, debug.OutcomeRejected}, {429, false, debug.OutcomeRejected},
		{502, false, debug.OutcomeFailed}, {0, false, debug.OutcomeFailed}} {
		if got := debug.OutcomeOf(tt.status, tt.cut); got != tt.want {
			t.Errorf("debug.OutcomeOf(%d, %v) = %s, want %s", tt.status, tt.cut, got, tt.want)
		}
	}
}

// Bundles written to the stream are found by request id (also an id that
// is no valid subject token) and listed newest first, filtered by outcome
// and provider on the server.
func TestGetAndList(t *testing.T) {
	s := natstest.Start(t, "127.0.0.1:0", "")
	_, js := testkit.ConnectNATS(t, s.ClientURL())
	ctx := context.Background()
	res, err := bus.Setup(ctx, js, bus.SetupOptions{Storage: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	put := func(id, outcome, provider string, status int) {
		t.Helper()
		b := debug.Bundle{V: debug.SchemaVersion, RequestID: id, At: time.Now().UTC(), Status: status, Outcome: outcome, Provider: provider, Model: "m",
			Attempts: []debug.Attempt{{N: 1, Provider: provider, Action: "served"}}}
		data, _ := json.Marshal(b)
		if _, err := js.Publish(ctx, debug.Subject(outcome, provider, id), data); err != nil {
			t.Fatal(err)
		}
	}
	put("req_1", debug.OutcomeOK, "openai", 200)
	put("req_2", debug.OutcomeFailed, "openai", 502)
	put("my id.with*dots>", debug.OutcomeFailed, "anthropic", 503)
	put("req_4", debug.OutcomeRejected, "", 400)

	b, err := debug.Get(ctx, res.Debug, "my id.with*dots>")
	if err != nil || b.Status != 503 || b.Provider != "anthropic" || len(b.Attempts) != 1 {
		t.Fatalf("debug.Get: %+v %v", b, err)
	}
	if _, err := debug.Get(ctx, res.Debug, "req_404"); !errors.Is(err, debug.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	ids := func(f debug.Filter) []string {
		t.Helper()
		list, err := debug.List(ctx, res.Debug, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list {
			out = append(out, s.RequestID)
		}
		return out
	}
	for _, tt := range []struct {
		f    debug.Filter
		want []string
	}{
		{debug.Filter{}, []string{"req_4", "my id.with*dots>", "req_2", "req_1"}},
		{debug.Filter{Outcome: debug.OutcomeFailed}, []string{"my id.with*dots>", "req_2"}},
		{debug.Filter{Outcome: debug.OutcomeFailed, Provider: "openai"}, []string{"req_2"}},
		{debug.Filter{Provider: "_"}, []string{"req_4"}},
		{debug.Filter{Limit: 2}, []string{"req_4", "my id.with*dots>"}},
		{debug.Filter{Since: time.Now().Add(time.Minute)}, nil},
	} {
		if got := ids(tt.f); !slices.Equal(got, tt.want) {
			t.Errorf("debug.List(%+v) = %q, want %q", tt.f, got, tt.want)
		}
	}
	if _, err := debug.List(ctx, res.Debug, debug.Filter{Provider: "a.b"}); err == nil {
		t.Error("a provider with a dot was accepted as a filter")
	}
	var _ jetstream.Stream = res.Debug
}

package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHoldsReleaseQueued: a 202 "queued" answer of the admin service is
// reported as queued, not as released.
func TestHoldsReleaseQueued(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodDelete || r.URL.Path != "/admin/holds/openai.primary" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"status":"queued","id":"openai.primary","message":"NATS JetStream did not take the write yet"}`))
	}))
	defer srv.Close()
	t.Setenv(envAdminURL, srv.URL)
	t.Setenv(envAdminToken, "op-secret")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"holds", "release", "openai.primary"}, "release of openai.primary queued, not written yet: NATS JetStream did not take the write yet\n"},
		{[]string{"holds", "release", "openai.primary", "--json"}, `{"message":"NATS JetStream did not take the write yet","queued":"openai.primary"}` + "\n"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), tt.args, strings.NewReader(""), &out, &errOut); err != nil {
			t.Fatalf("%v: %v %s", tt.args, err, errOut.String())
		}
		if out.String() != tt.want {
			t.Errorf("%v: %q, want %q", tt.args, out.String(), tt.want)
		}
	}
}

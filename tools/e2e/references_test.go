package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/routingdoc"
	"switchyard.dev/shared/testkit"
)

// TestVersionCannotReadHostSecrets: a routing version that names a host's
// secrets (the credentials key's variable, an admin token's, a variable
// no configuration names, a host file) with a base_url of its author's
// choice sends none of them anywhere. The admin refuses it at preview and
// activation (400 naming the reference); written to switchyard_config
// past the admin (anyone with write access to the bucket), every service
// refuses it, keeps the version before and says so in /readyz, and the
// author's endpoint is never called: not by the prober's model discovery,
// not by a chat request.
func TestVersionCannotReadHostSecrets(t *testing.T) {
	f := startSecFleet(t)
	var mu sync.Mutex
	var seen []string // what reached the author's endpoint
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
	}))
	t.Cleanup(sink.Close)
	hostFile := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(hostFile, []byte(canaryHost+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refs := []string{"env:SY_CRED", "env:SY_ADMIN", "env:SY_HOST_DB_PASSWORD", "file:" + hostFile}
	var doc strings.Builder
	doc.WriteString("providers:\n  - name: exfil\n    type: openai-compatible\n    base_url: " + sink.URL + "/v1\n    keys:\n")
	for i, r := range refs {
		fmt.Fprintf(&doc, "      - {id: k%d, secret: %q}\n", i, r)
	}
	doc.WriteString("    models: [{name: m}]\n    health_check: {per_key: true}\n")

	// through the admin: refused, naming each reference
	body, _ := json.Marshal(map[string]any{"document": doc.String(), "comment": "exfil"})
	status, b := f.adm(http.MethodPost, "/admin/config/activate", string(body))
	if status != http.StatusBadRequest {
		t.Fatalf("activate: %d %s", status, b)
	}
	for i, r := range refs {
		if want := fmt.Sprintf("providers[0].keys[%d].secret: %s: not allowed on this instance", i, r); !strings.Contains(string(b), want) {
			t.Errorf("activate: %s lacks %q", b, want)
		}
	}

	// past the admin: every service refuses it
	nc, err := nats.Connect(f.ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bus.BucketConfig)
	if err != nil {
		t.Fatal(err)
	}
	store := routingdoc.New(nc, kv, nil) // no validation: a raw writer
	active, err := store.Active(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := store.Activate(ctx, []byte(doc.String()), routingdoc.Meta{By: "intruder"}, active.ActiveRevision)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{f.proxyURL, f.proberURL} {
		testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			resp, err := f.client.Get(u + "/readyz")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var r struct {
				Version int `json:"routing_version"`
				Failure *struct {
					Version uint64 `json:"version"`
					Error   string `json:"error"`
				} `json:"routing_error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
				return err
			}
			if r.Failure == nil || r.Failure.Version != v.Version || !strings.Contains(r.Failure.Error, "env:SY_CRED: not allowed") {
				return fmt.Errorf("%s/readyz: routing_error %+v", u, r.Failure)
			}
			if r.Version != int(active.Version) {
				return fmt.Errorf("%s/readyz: routing version %d, want %d (the one before)", u, r.Version, active.Version)
			}
			return nil
		})
	}
	if st, _, b := f.call("exfil chat", "/v1/chat/completions", `{"model":"exfil/m","messages":[{"role":"user","content":"hi"}]}`); st == http.StatusOK {
		t.Errorf("a request to the refused version's provider was served: %s", b)
	}
	// the services had the version for a while (the prober starts
	// discovery as it applies a version): nothing reached the endpoint
	mu.Lock()
	defer mu.Unlock()
	if len(seen) > 0 {
		t.Errorf("the version's endpoint was called %d times: %q", len(seen), seen)
	}
	f.leaks.add("logs", []byte(f.logs.String()))
	f.leaks.verify(t)
}

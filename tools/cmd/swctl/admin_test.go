package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/admin"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/fleet"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
)

// testFleet is a real admin service on an embedded NATS server, with a
// stand-in proxy (a fleet member on its own connection).
type testFleet struct {
	adminURL string
	proxy    *fleet.Member
	pnc      *nats.Conn
}

// startFleet starts a testFleet with an operator token op-secret and a
// read token ro-secret, and waits until the stand-in proxy is bound.
func startFleet(t *testing.T) *testFleet {
	t.Helper()
	return startFleetWith(t, "")
}

// fleetEnviron is the test fleet's environment: the secrets of its
// configuration and of the routing documents the tests activate.
var fleetEnviron = []string{"T_OP=op-secret", "T_RO=ro-secret", "T_K=sk-x", "T_K2=sk-y", "T_CA=client-a-secret", "T_CB=client-b-secret"}

// startFleetWith is startFleet with extra top-level configuration (YAML)
// appended; secrets env:T_CA and env:T_CB are set for client keys.
func startFleetWith(t *testing.T, extraYAML string) *testFleet {
	t.Helper()
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsembed.Stop(ns) })
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	y := fmt.Sprintf(`nats: {url: %q, storage: memory}
admin:
  tokens:
    - {id: ops, secret: env:T_OP, role: operator}
    - {id: ro, secret: env:T_RO, role: read}
credentials:
  references: {env_prefixes: [T_]}
providers:
  - name: openai
    type: openai
    keys: [{id: primary, secret: env:T_K}]
    models: [{name: gpt-4o}, {name: gpt-4o-mini}]
`, ns.ClientURL()) + extraYAML
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, fleetEnviron)
	if err != nil {
		t.Fatal(err)
	}
	anc, _ := nats.Connect(ns.ClientURL())
	pnc, _ := nats.Connect(ns.ClientURL())
	svc, err := admin.New(cfg, admin.Deps{NATS: anc, Environ: fleetEnviron})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, ln) }()
	proxy, _ := fleet.New(cfg, fleet.Options{Service: "proxy", NATS: pnc})
	pdone := make(chan error, 1)
	go func() { pdone <- proxy.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; <-pdone; pnc.Close(); anc.Close() })

	select {
	case <-proxy.Bound():
	case <-time.After(10 * time.Second):
		t.Fatal("the stand-in proxy did not bind the buckets")
	}
	// the admin service binds them on its own: its routes that need NATS
	// answer 503 until /readyz is 200
	adminURL := "http://" + ln.Addr().String()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get(adminURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admin service is not ready: %v", err)
		}
	}
	return &testFleet{adminURL: adminURL, proxy: proxy, pnc: pnc}
}

// swctl runs swctl with args and returns its stdout, stderr and error.
func swctl(args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, args, strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestAdminVerbs runs the admin verbs against a real admin service on an
// embedded NATS server, with a hold recorded by a stand-in proxy.
func TestAdminVerbs(t *testing.T) {
	f := startFleet(t)
	proxy := f.proxy
	t.Setenv(envAdminURL, f.adminURL)
	t.Setenv(envAdminToken, "op-secret")

	// record a hold
	deadline := time.Now().Add(10 * time.Second)
	proxy.Engine.Report("openai", "primary", "gpt-4o", false, hold.Outcome{Status: 401,
		Result: failure.Result{Class: failure.CredentialRejected, Scope: failure.ScopeKey, Code: "invalid_api_key", Reason: "provider code invalid_api_key"}})
	var (
		out string
		err error
	)
	for time.Now().Before(deadline) {
		out, _, err = swctl("holds", "ls")
		if err == nil && strings.Contains(out, "openai.primary") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out, "ID") || !strings.Contains(out, "credential_rejected") || !strings.Contains(out, "held") {
		t.Fatalf("holds ls: %v\n%s", err, out)
	}

	out, _, err = swctl("holds", "ls", "-provider", "openai", "--json")
	var listed struct {
		Holds []map[string]any `json:"holds"`
	}
	if err != nil || json.Unmarshal([]byte(out), &listed) != nil || len(listed.Holds) != 1 {
		t.Fatalf("holds ls --json: %v %s", err, out)
	}

	out, _, err = swctl("providers", "status")
	if err != nil || !strings.Contains(out, "offline") || !strings.Contains(out, "primary") || !strings.Contains(out, "credential_rejected") {
		t.Fatalf("providers status: %v\n%s", err, out)
	}
	out, _, err = swctl("providers", "status", "--json")
	if err != nil || !json.Valid([]byte(out)) {
		t.Fatalf("providers status --json: %v %s", err, out)
	}

	// a read token may list but not release
	_, _, err = swctl("holds", "release", "openai.primary", "-token", "ro-secret")
	if err == nil || !strings.Contains(err.Error(), "403 forbidden") {
		t.Fatalf("release with a read token: %v", err)
	}
	_, _, err = swctl("holds", "release", "openai.nokey")
	if err == nil || !strings.Contains(err.Error(), "404 not_found") {
		t.Fatalf("release unknown: %v", err)
	}
	out, _, err = swctl("holds", "release", "openai.primary")
	if err != nil || !strings.Contains(out, "released openai.primary") {
		t.Fatalf("release: %v %s", err, out)
	}

	// the import of the file's routing configuration at the fleet's first
	// start, the hold, its release
	out, _, err = swctl("events", "tail", "-since", "10m", "-n", "3")
	if err != nil || !strings.Contains(out, "config  version 1  -  import  by admin-") || !strings.Contains(out, "hold") ||
		!strings.Contains(out, "release") || !strings.Contains(out, "openai/primary") {
		t.Fatalf("events tail: %v\n%s", err, out)
	}
	out, _, err = swctl("events", "tail", "-since", "10m", "-kind", "release", "-n", "1", "--json")
	if err != nil || !strings.Contains(out, `"kind":"release"`) {
		t.Fatalf("events tail --json: %v\n%s", err, out)
	}

	t.Setenv(envAdminToken, "")
	if _, _, err = swctl("holds", "ls"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("no token: %v", err)
	}
	if _, _, err = swctl("holds", "bogus"); err == nil {
		t.Fatal("unknown holds verb accepted")
	}
}

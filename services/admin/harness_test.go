package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/fleet"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
)

const (
	opToken     = "op-token-0123456789"
	readToken   = "read-token-0123456789"
	clientKey   = "client-key-0123456789"
	credKeyHex  = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	testTimeout = 10 * time.Second
)

// testYAML configures two providers: openai (two keys, breaker, a trip_on
// rule of its own) and local (keyless vllm, breaker off).
const testYAML = `
nats:
  url: nats://127.0.0.1:4222
admin:
  tokens:
    - {id: oncall, secret: env:T_OP, role: operator}
    - {id: viewer, secret: env:T_READ, role: read}
credentials:
  encryption_key: env:T_CRED
  references:
    env_prefixes: [T_]
clients:
  - {id: app, secret: env:T_CLIENT, models: ["*"]}
trip_on:
  global-rule:
    match: 'weird global thing'
    class: quota_exhausted
providers:
  - name: openai
    type: openai
    base_url: http://127.0.0.1:1/v1
    keys:
      - {id: primary, secret: env:T_K1}
      - {id: secondary, secret: env:T_K2}
    models: [{name: gpt-4o}, {name: gpt-4.1}]
    resilience:
      breaker: {consecutive_failures: 3, cooldown: 30s}
    trip_on:
      org-suspended:
        match: 'organization .* suspended'
        class: credential_rejected
        ttl: 2h
  - name: local
    type: vllm
    base_url: http://127.0.0.1:1/v1
    models: [{name: llama}]
    resilience:
      breaker: {enabled: false}
`

// testEnviron is the environment of the test configurations: the
// admin service resolves the routing documents' env: secrets from it too
// (Deps.Environ).
var testEnviron = []string{
	"T_OP=" + opToken, "T_READ=" + readToken, "T_CLIENT=" + clientKey, "T_CRED=" + credKeyHex,
	"T_K1=sk-old-primary", "T_K2=sk-old-secondary", "T_K3=sk-third",
	"T_CA=" + planClientKeyA, "T_CB=" + planClientKeyB,
}

func loadConfig(t *testing.T, natsURL string, withKey bool) *config.Config {
	t.Helper()
	return loadConfigEdit(t, natsURL, withKey, nil)
}

// loadConfigEdit is loadConfig with testYAML changed by edit (nil: as is).
func loadConfigEdit(t *testing.T, natsURL string, withKey bool, edit func(string) string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	y := strings.Replace(testYAML, "nats://127.0.0.1:4222", natsURL, 1)
	if !withKey {
		y = strings.Replace(y, "  encryption_key: env:T_CRED\n", "", 1)
	}
	if edit != nil {
		y = edit(y)
	}
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, testEnviron)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// env is one test fleet: an embedded NATS server, an admin service on a
// real listener, and a stand-in proxy (a fleet member with its own engine
// on its own connection) that records holds the way the proxy does.
type env struct {
	t     *testing.T
	ns    *server.Server
	dir   string // the NATS server's store
	addr  string // and address, to restart it there
	cfg   *config.Config
	svc   *Service
	base  string
	proxy *fleet.Member
	pnc   *nats.Conn
	anc   *nats.Conn
	// limitsNow is the plan limits' clock (envOptions.limitsNow), the
	// stand-in proxies' too.
	limitsNow func() time.Time
}

func startEnv(t *testing.T, withKey bool) *env {
	t.Helper()
	return startEnvWith(t, envOptions{withKey: withKey})
}

type envOptions struct {
	withKey bool
	// fileStore keeps the buckets in files (memory by default), so that
	// they outlive a restart of the server (restartServer).
	fileStore bool
	// usageMaxScan is Deps.UsageMaxScan.
	usageMaxScan int
	// edit changes testYAML before it is loaded (plansYAML adds plans).
	edit func(string) string
	// explainTimeout is Deps.ExplainTimeout; log is Deps.Log.
	explainTimeout time.Duration
	log            *slog.Logger
	// noRecorder is Deps.NoUsageRecorder: reports read the stream only
	// (or the rollups of a recorder the test starts, startRecorder).
	noRecorder bool
	// backlogEvery is Deps.BacklogEvery.
	backlogEvery time.Duration
	// limitsNow is Deps.LimitsNow, and the clock of standInProxy's
	// limiters (nil: time.Now).
	limitsNow func() time.Time
}

func startEnvWith(t *testing.T, o envOptions) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), limitsNow: o.limitsNow}
	// a port of the server's own choosing (a port picked free and then
	// listened on may be taken between the two); restartServer reuses it
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: e.dir})
	if err != nil {
		t.Fatal(err)
	}
	e.ns = ns
	e.addr = ns.Addr().String()
	t.Cleanup(func() { natsembed.Stop(e.ns) })
	e.cfg = loadConfigEdit(t, ns.ClientURL(), o.withKey, o.edit)
	e.cfg.NATS.Storage = "memory"
	if o.fileStore {
		e.cfg.NATS.Storage = "file"
	}

	// the recorder writes often, so that tests wait little for it
	e.cfg.Metering.Rollups.FlushInterval = 20 * time.Millisecond
	e.cfg.Metering.Rollups.Lease = 3 * time.Second

	e.anc, _ = testkit.ConnectNATS(t, ns.ClientURL())
	e.svc, err = New(e.cfg, Deps{NATS: e.anc, Heartbeat: 200 * time.Millisecond, UsageMaxScan: o.usageMaxScan, Environ: testEnviron,
		ExplainTimeout: o.explainTimeout, Log: o.log, NoUsageRecorder: o.noRecorder, BacklogEvery: o.backlogEvery,
		LimitsNow: o.limitsNow})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.base = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.svc.Serve(ctx, ln) }()

	e.pnc, _ = testkit.ConnectNATS(t, ns.ClientURL())
	e.proxy, err = fleet.New(e.cfg, fleet.Options{Service: "proxy", NATS: e.pnc})
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithCancel(context.Background())
	pdone := make(chan error, 1)
	go func() { pdone <- e.proxy.Run(pctx) }()

	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(ShutdownTimeout + 5*time.Second):
			t.Error("Serve did not return")
		}
		pcancel()
		<-pdone
		e.pnc.Close()
		e.anc.Close()
	})
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		if !e.svc.natsUp() || e.proxy.Resources() == nil {
			return fmt.Errorf("not bound yet")
		}
		select {
		case <-e.svc.followed.Loaded():
		default:
			return fmt.Errorf("routing configuration not loaded yet")
		}
		return nil
	})
	return e
}

// fail reports a failure of the stand-in proxy on a target.
func (e *env) fail(provider, key, model string, res failure.Result, status int) {
	e.proxy.Engine.Report(provider, key, model, false, hold.Outcome{Result: res, Status: status})
}

var credentialRejected = failure.Result{Class: failure.CredentialRejected, Scope: failure.ScopeKey, Code: "invalid_api_key", Reason: "provider code invalid_api_key"}

// waitHold polls the admin API until hold id is listed with state.
func (e *env) waitHold(id string, state hold.State) map[string]any {
	e.t.Helper()
	var got map[string]any
	testkit.CheckFor(e.t, testTimeout, 10*time.Millisecond, func() error {
		a := e.do("GET", "/admin/holds/"+id, opToken, nil)
		if a.status != 200 {
			return fmt.Errorf("status %d %v", a.status, a.body)
		}
		if a.body["state"] != string(state) {
			return fmt.Errorf("state %v", a.body["state"])
		}
		got = a.body
		return nil
	})
	return got
}

type reply struct {
	status int
	body   map[string]any
	list   []any
	raw    []byte
	header http.Header
}

// do sends a request with token ("" for none) and a JSON or raw body.
func (e *env) do(method, path, token string, body any) reply {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: raw, header: resp.Header}
	if len(raw) > 0 && raw[0] == '[' {
		_ = json.Unmarshal(raw, &r.list)
	} else {
		_ = json.Unmarshal(raw, &r.body)
	}
	return r
}

// errCode is the error.code of an error answer.
func (r reply) errCode() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// errMessage is the message of an error answer.
func (r reply) errMessage() string {
	e, _ := r.body["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

func (r reply) expect(t *testing.T, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	if code != "" && r.errCode() != code {
		t.Fatalf("error code %q, want %q: %s", r.errCode(), code, r.raw)
	}
}

// stopServer stops the fleet's NATS server.
func stopServer(e *env) { natsembed.Stop(e.ns) }

// restartServer starts the fleet's NATS server again on its address and
// store (the buckets come back with envOptions.fileStore).
func restartServer(e *env) {
	e.t.Helper()
	ns, err := natsembed.Start(natsembed.Options{Listen: e.addr, StoreDir: e.dir})
	if err != nil {
		e.t.Fatal(err)
	}
	e.ns = ns
}

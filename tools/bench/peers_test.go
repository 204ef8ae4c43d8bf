package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// None of these tests needs node or npm: peers are never a test
// dependency.

func TestParsePeers(t *testing.T) {
	got, err := parsePeers(" portkey, portkey ,")
	if err != nil || !slices.Equal(got, []string{"portkey"}) {
		t.Errorf("parsePeers: %v, %v", got, err)
	}
	if got, err := parsePeers(""); err != nil || got != nil {
		t.Errorf("parsePeers(\"\"): %v, %v", got, err)
	}
	if _, err := parsePeers("portkey,litellm"); err == nil || !strings.Contains(err.Error(), `"litellm"`) {
		t.Errorf("unknown peer: %v", err)
	}
}

func TestPortkeyTarget(t *testing.T) {
	c := &child{name: "portkey", addr: "127.0.0.1:4000"}
	tg := portkeyTarget(c, "http://127.0.0.1:5000/v1", "sk-up")
	if tg.Name != "portkey" || tg.Addr != c.addr || tg.Auth != "Bearer sk-up" || tg.Model != upModel || tg.Proc != c {
		t.Errorf("target %+v", tg)
	}
	want := []header{{"x-portkey-provider", "openai"}, {"x-portkey-custom-host", "http://127.0.0.1:5000/v1"}}
	if !slices.Equal(tg.Headers, want) {
		t.Errorf("headers %v, want %v", tg.Headers, want)
	}
	if s := peers["portkey"].single(c, "http://127.0.0.1:5000/v1", "sk-up"); !slices.Equal(s.Headers, want) || s.Auth != tg.Auth {
		t.Errorf("portkey single %+v", s)
	}
}

func TestPortkeyFallbackConfig(t *testing.T) {
	c := &child{name: "portkey", addr: "127.0.0.1:4000"}
	tg := peers["portkey"].fallback(c, "http://127.0.0.1:5000/v1", "sk-revoked", "sk-good")
	if tg.Auth != "" || tg.Model != upModel || len(tg.Headers) != 1 || tg.Headers[0].Name != "x-portkey-config" {
		t.Fatalf("target %+v", tg)
	}
	// The shape Portkey's config schema takes: snake_case keys, targets
	// tried in order.
	var cfg map[string]any
	if err := json.Unmarshal([]byte(tg.Headers[0].Value), &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"strategy": map[string]any{"mode": "fallback"},
		"targets": []any{
			map[string]any{"provider": "openai", "api_key": "sk-revoked", "custom_host": "http://127.0.0.1:5000/v1"},
			map[string]any{"provider": "openai", "api_key": "sk-good", "custom_host": "http://127.0.0.1:5000/v1"},
		},
	}
	gb, _ := json.Marshal(cfg)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("config\n%s\nwant\n%s", gb, wb)
	}
}

func TestPortkeyManifestAndArgs(t *testing.T) {
	var m struct {
		Dependencies map[string]string `json:"dependencies"`
		Overrides    map[string]string `json:"overrides"`
	}
	if err := json.Unmarshal(portkeyManifest(), &m); err != nil {
		t.Fatal(err)
	}
	if m.Dependencies["@portkey-ai/gateway"] != portkeyVersion || m.Overrides["@hono/node-server"] != portkeyNodeServer {
		t.Errorf("manifest %+v", m)
	}
	args := portkeyArgs("/run/shim.cjs", "/cache/portkey", 4123)
	want := []string{"--require", "/run/shim.cjs", "/cache/portkey/node_modules/@portkey-ai/gateway/build/start-server.js", "--port=4123", "--headless"}
	if !slices.Equal(args, want) {
		t.Errorf("args %q, want %q", args, want)
	}
	if !strings.Contains(loopbackShim, "'127.0.0.1'") {
		t.Error("the shim does not bind to loopback")
	}
}

// writeInstall lays out what npm leaves under dir: the gateway and
// @hono/node-server at the given versions (nested: under the gateway's
// own node_modules, which node resolves first).
func writeInstall(t *testing.T, dir, gateway, nodeServer string, nested bool) {
	t.Helper()
	gw := filepath.Join(dir, "node_modules", "@portkey-ai", "gateway")
	hs := filepath.Join(dir, "node_modules", "@hono", "node-server")
	if nested {
		hs = filepath.Join(gw, "node_modules", "@hono", "node-server")
	}
	for p, body := range map[string]string{
		filepath.Join(gw, "package.json"):             `{"name":"@portkey-ai/gateway","version":"` + gateway + `"}`,
		filepath.Join(gw, "build", "start-server.js"): "// server\n",
		filepath.Join(hs, "package.json"):             `{"name":"@hono/node-server","version":"` + nodeServer + `"}`,
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPortkeyInstalled(t *testing.T) {
	ok := t.TempDir()
	writeInstall(t, ok, portkeyVersion, portkeyNodeServer, false)
	if !portkeyInstalled(ok) {
		t.Error("the pinned install is not recognised")
	}
	// npm resolved the gateway's own range: a newer @hono/node-server
	// nested under the gateway wins over the top-level pin.
	nested := t.TempDir()
	writeInstall(t, nested, portkeyVersion, portkeyNodeServer, false)
	writeInstall(t, nested, portkeyVersion, "1.19.19", true)
	if portkeyInstalled(nested) {
		t.Error("a nested @hono/node-server 1.19.19 passes for the pin")
	}
	old := t.TempDir()
	writeInstall(t, old, "1.9.8", portkeyNodeServer, false)
	if portkeyInstalled(old) || portkeyInstalled(t.TempDir()) {
		t.Error("another version or an empty directory passes for the install")
	}
}

// fakeNPM puts an npm on PATH (alone: no node) running script (with the
// system's usual PATH).
func fakeNPM(t *testing.T, script string) {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "npm"), []byte("#!/bin/sh\nPATH=/usr/bin:/bin\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
}

func TestEnsurePortkeyInstalls(t *testing.T) {
	// npm install --prefix DIR ...: lay the pinned packages out under DIR.
	fakeNPM(t, `dir=$3
mkdir -p "$dir/node_modules/@portkey-ai/gateway/build" "$dir/node_modules/@hono/node-server"
echo '{"version":"`+portkeyVersion+`"}' > "$dir/node_modules/@portkey-ai/gateway/package.json"
echo '// server' > "$dir/node_modules/@portkey-ai/gateway/build/start-server.js"
echo '{"version":"`+portkeyNodeServer+`"}' > "$dir/node_modules/@hono/node-server/package.json"
`)
	cache := t.TempDir()
	dir, err := ensurePortkey(context.Background(), options{}, cache)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "portkey-"+portkeyVersion); dir != want || !portkeyInstalled(dir) {
		t.Fatalf("installed in %s (want %s), whole: %v", dir, want, portkeyInstalled(dir))
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil || !strings.Contains(string(b), `"@hono/node-server": "`+portkeyNodeServer+`"`) {
		t.Errorf("package.json %s, %v", b, err)
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 1 {
		t.Errorf("cache holds %d entries, want the install alone", len(entries))
	}
	// Present: reused without npm.
	t.Setenv("PATH", t.TempDir())
	if again, err := ensurePortkey(context.Background(), options{}, cache); err != nil || again != dir {
		t.Errorf("second ensure: %s, %v", again, err)
	}
}

func TestEnsurePortkeyFailures(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := ensurePortkey(context.Background(), options{}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "needs npm") {
		t.Errorf("without npm: %v", err)
	}

	fakeNPM(t, "echo 'npm error code E404' >&2\nexit 1\n")
	cache := t.TempDir()
	_, err = ensurePortkey(context.Background(), options{}, cache)
	if err == nil || !strings.Contains(err.Error(), `"npm install --prefix `) || !strings.Contains(err.Error(), "E404") {
		t.Errorf("failed install: %v", err)
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Errorf("a failed install left %d entries in the cache", len(entries))
	}

	// npm succeeds but resolves another @hono/node-server.
	fakeNPM(t, `dir=$3
mkdir -p "$dir/node_modules/@portkey-ai/gateway/build" "$dir/node_modules/@hono/node-server"
echo '{"version":"`+portkeyVersion+`"}' > "$dir/node_modules/@portkey-ai/gateway/package.json"
echo '// server' > "$dir/node_modules/@portkey-ai/gateway/build/start-server.js"
echo '{"version":"1.19.19"}' > "$dir/node_modules/@hono/node-server/package.json"
`)
	_, err = ensurePortkey(context.Background(), options{}, cache)
	if err == nil || !strings.Contains(err.Error(), `found "`+portkeyVersion+`" and "1.19.19"`) {
		t.Errorf("wrong resolution: %v", err)
	}

	if _, err := startPortkey(context.Background(), options{}, t.TempDir()); err == nil || !strings.Contains(err.Error(), "needs node") {
		t.Errorf("without node: %v", err)
	}
}

// TestLoaderHeaders: a target's extra headers are sent, and no
// Authorization header when the target has none.
func TestLoaderHeaders(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		_, _ = w.Write([]byte(`{"choices":[]}`))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		t        target
		wantAuth string
	}{
		{target{Addr: addr, Auth: "Bearer k", Headers: []header{{"x-portkey-provider", "openai"}}}, "Bearer k"},
		{target{Addr: addr, Headers: []header{{"x-portkey-config", `{"a":1}`}}}, ""},
	} {
		l := newLoader(tc.t, 1, false, chatBody(upModel, false))
		buf := []byte{}
		for _, ld := range []*loader{l, l.scratch()} {
			got = nil
			if _, err := ld.do(&buf); err != nil {
				t.Fatal(err)
			}
			if _, ok := got["Authorization"]; ok != (tc.wantAuth != "") || got.Get("Authorization") != tc.wantAuth {
				t.Errorf("Authorization %q, want %q", got.Values("Authorization"), tc.wantAuth)
			}
			for _, h := range tc.t.Headers {
				if got.Get(h.Name) != h.Value {
					t.Errorf("%s: %q, want %q", h.Name, got.Get(h.Name), h.Value)
				}
			}
		}
		l.hc.CloseIdleConnections()
	}
}

// Peers are measured in closed-loop modes only: an open-loop rate beyond a
// peer's capacity would leave it a backlog running into the next turn.
func TestPeersSkipOpenLoopModes(t *testing.T) {
	ts := []target{{Name: "direct"}, {Name: "switchyard"}, {Name: "portkey"}, {Name: "floor"}}
	names := func(ts []target) string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tt := range []struct {
		mode, want string
	}{
		{"seq", "direct,switchyard,portkey,floor"},
		{"sat64", "direct,switchyard,portkey,floor"},
		{"rate2000", "direct,switchyard,floor"},
	} {
		m, err := parseMode(tt.mode, 16)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(modeTargets(options{}, ts, m)); got != tt.want {
			t.Errorf("%s: targets %s, want %s", tt.mode, got, tt.want)
		}
	}
}

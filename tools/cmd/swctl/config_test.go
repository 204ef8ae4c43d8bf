package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"switchyard.dev/shared/routingdoc"
)

// chainsYAML gives the test fleet a chain of two steps.
const chainsYAML = `chains:
  default:
    steps:
      - {target: openai/gpt-4o}
      - {target: openai/gpt-4o-mini}
`

// routingV2 is a routing document: openai gets a second key and a model.
const routingV2 = `providers:
  - name: openai
    type: openai
    keys:
      - {id: primary, secret: env:T_K}
      - {id: second, secret: env:T_K2, weight: 2}
    models: [{name: gpt-4o}, {name: gpt-4o-mini}, {name: gpt-4.1}]
chains:
  default:
    steps:
      - {target: openai/gpt-4o}
      - {target: openai/gpt-4o-mini}
`

const routingBad = `providers:
  - name: openai
    type: openai-ng
    keys: [{id: primary, secret: env:T_K}]
    models: [{name: gpt-4o}]
`

// routingVersion is the admin service's /readyz routing_version.
func (f *testFleet) routingVersion(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(f.adminURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		RoutingVersion int `json:"routing_version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.RoutingVersion
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigVerbs runs swctl config against a real admin service on an
// embedded NATS server: the file's routing is version 1; a document is
// previewed (invalid, then valid), activated, diffed; a step and a key
// are edited; version 1 is rolled back to; a full configuration file is
// imported; a read token cannot write.
func TestConfigVerbs(t *testing.T) {
	f := startFleetWith(t, chainsYAML)
	t.Setenv(envAdminURL, f.adminURL)
	t.Setenv(envAdminToken, "op-secret")
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := swctl(args...)
		if err != nil {
			t.Fatalf("swctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	wants := func(what, out string, subs ...string) {
		t.Helper()
		for _, s := range subs {
			if !strings.Contains(out, s) {
				t.Errorf("%s: no %q in:\n%s", what, s, out)
			}
		}
	}

	out := run("config", "show")
	wants("show", out, "# version 1 (active, revision ", "# import by admin-", "env:T_K", "gpt-4o-mini")
	out = run("config", "history")
	wants("history", out, "VERSION", "1        *")

	// an invalid document: the loader's messages, exit 1, nothing activated
	bad := writeFile(t, "bad.yaml", routingBad)
	out, _, err := swctl("config", "preview", bad)
	if !errors.Is(err, errSilent) {
		t.Errorf("preview of an invalid document: err %v", err)
	}
	wants("preview invalid", out, "invalid: 1 problem(s)", `candidate: providers[0].type: unknown type "openai-ng"`)
	out, _, err = swctl("config", "activate", bad, "-m", "oops")
	if !errors.Is(err, errSilent) || !strings.Contains(out, "unknown type") {
		t.Errorf("activate an invalid document: %v\n%s", err, out)
	}

	// a valid one: its diff, then activated
	good := writeFile(t, "routing.yaml", routingV2)
	out = run("config", "preview", good)
	wants("preview", out, "valid\n", "# changes from the active version 1", `+ providers.openai.keys.second: {"id":"second","secret":"env:T_K2","weight":2}`, "2 added, 0 changed, 0 removed")
	out = run("config", "activate", good, "-m", "second key")
	wants("activate", out, "version 2 active (activate, replaces 1) by ops", "instances: 1 applied, 0 refused, 0 pending")
	if v := f.routingVersion(t); v != 2 {
		t.Errorf("the admin service routes with version %d", v)
	}
	out = run("config", "activate", good)
	wants("activate again", out, "unchanged: version 2 is active")
	out = run("config", "diff")
	wants("diff", out, "# version 1 -> 2", "+ providers.openai.keys.second", `+ providers.openai.models["gpt-4.1"]`)
	if out2 := run("config", "diff", "1", "2"); out2 != out {
		t.Errorf("diff 1 2:\n%s\nwant\n%s", out2, out)
	}

	// small edits
	out = run("config", "step", "default", "1", "off", "-m", "drain mini")
	wants("step", out, "version 3 active (edit of version 2: chains.default.steps[1].active: true -> false, replaces 2) by ops")
	out = run("config", "key", "openai", "second", "--weight", "5", "--priority", "1")
	wants("key", out, "version 4 active (edit of version 3: ")
	out = run("config", "diff", "3", "4")
	wants("diff of the key edit", out, "~ providers.openai.keys.second.weight: 2 -> 5", "+ providers.openai.keys.second.priority: 1")
	out = run("config", "key", "openai", "second", "--enabled", "false", "-m", "suspected leak")
	wants("key off", out, "version 5 active (edit of version 4: added providers.openai.keys.second.enabled")
	out = run("config", "key", "openai", "second", "--enabled=false")
	wants("key off again", out, "unchanged: version 5 is active")

	// rollback, import
	out = run("config", "rollback", "1", "-m", "back to the file")
	wants("rollback", out, "version 6 active (rollback to version 1, replaces 5)")
	full := writeFile(t, "gateway.yaml", fmt.Sprintf("nats: {url: nats://127.0.0.1:1}\nadmin: {listen: 127.0.0.1:0}\n%s", routingV2))
	// the file the docs say to preview before importing it: its routing
	// part, as import takes it
	out = run("config", "preview", full)
	wants("preview of a full file", out, "valid\n", "# changes from the active version 6", "+ providers.openai.keys.second")
	out = run("config", "import", full)
	wants("import", out, "version 7 active (activate, replaces 6)")
	out = run("config", "show")
	wants("show after import", out, "# comment: imported from gateway.yaml", "second")
	if strings.Contains(out, "nats:") || strings.Contains(out, "listen") {
		t.Errorf("import activated more than the routing keys:\n%s", out)
	}
	out = run("config", "show", "2")
	// the version's sha256 reaches the CLI (the admin API's types are
	// swctl's: adminapi): the SHA-256 of the document activated
	wants("show 2", out, "# version 2\n", "# comment: second key", "# sha256 "+routingdoc.Sum([]byte(routingV2))+"\n")
	out = run("config", "history")
	for _, line := range []string{"7        *", "6", "rollback (from 1)", "edit (from 3)", "drain mini", "suspected leak", "activate", "import"} {
		wants("history", out, line)
	}
	if n := strings.Count(out, "\n"); n != 8 {
		t.Errorf("history has %d lines:\n%s", n, out)
	}
	out = run("config", "history", "--json")
	if !json.Valid([]byte(out)) {
		t.Errorf("history --json: %s", out)
	}

	// refusals
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"read token", []string{"config", "step", "default", "0", "off", "-token", "ro-secret"}, "403 forbidden"},
		{"unknown step", []string{"config", "step", "default", "9", "off"}, "404 not_found"},
		{"unknown chain", []string{"config", "step", "nope", "0", "off"}, "404 not_found"},
		{"unknown key", []string{"config", "key", "openai", "nope", "--weight", "1"}, "404 not_found"},
		{"unknown version", []string{"config", "rollback", "99"}, "404 not_found"},
		{"stale base", []string{"config", "rollback", "2", "-base", "1"}, "409 conflict"},
		{"key without a field", []string{"config", "key", "openai", "primary"}, "give --weight"},
		{"enabled neither true nor false", []string{"config", "key", "openai", "primary", "--enabled", "maybe"}, "want true or false"},
		{"step neither on nor off", []string{"config", "step", "default", "0", "maybe"}, "want on or off"},
		{"unknown verb", []string{"config", "frobnicate"}, "unknown verb"},
		{"missing file", []string{"config", "activate", filepath.Join(t.TempDir(), "none.yaml")}, "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := swctl(tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want %q", err, tt.want)
			}
		})
	}
	if v := f.routingVersion(t); v != 7 {
		t.Errorf("after the refusals the admin service routes with version %d, want 7", v)
	}
}

// TestAPIErrorKeepsLoaderMessages: an invalid_config answer's loader
// messages reach the error swctl prints, each on its line.
func TestAPIErrorKeepsLoaderMessages(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"code":"invalid_config","message":"the document does not load","errors":["providers[0].type: unknown type","chains.x: no steps"]}}`))
	}))
	defer srv.Close()
	a := &adminFlags{url: srv.URL, token: "t"}
	_, err := a.openAs(context.Background(), http.MethodPost, "/admin/config/activate", "application/json", strings.NewReader("{}"))
	var ae *apiError
	if !errors.As(err, &ae) || len(ae.Errors) != 2 {
		t.Fatalf("err %v, want an apiError with the 2 loader messages", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "\n  providers[0].type: unknown type\n  chains.x: no steps") {
		t.Errorf("error text %q", msg)
	}
}

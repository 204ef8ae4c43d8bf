package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/routingdoc"
	"switchyard.dev/shared/servicetest"
	"switchyard.dev/shared/testkit"
)

// chainYAML adds a chain of two steps to testYAML.
func chainYAML(y string) string {
	return y + `chains:
  default:
    steps:
      - {target: openai/gpt-4o}
      - {target: local/llama}
`
}

// startConfigEnv is a test fleet whose file has a chain; the admin
// service imports its routing as version 1.
func startConfigEnv(t *testing.T) *env {
	t.Helper()
	e := startEnvWith(t, envOptions{withKey: true, edit: chainYAML})
	e.waitRouting(1)
	return e
}

// docV2 is a routing document: openai gets a third key (weight 5), the
// chain loses its second step, the global trip rule goes.
const docV2 = `providers:
  - name: openai
    type: openai
    base_url: http://127.0.0.1:1/v1
    keys:
      - {id: primary, secret: env:T_K1}
      - {id: secondary, secret: env:T_K2}
      - {id: third, secret: env:T_K3, weight: 5}
    models: [{name: gpt-4o}, {name: gpt-4.1}]
  - name: local
    type: vllm
    base_url: http://127.0.0.1:1/v1
    models: [{name: llama}]
chains:
  default:
    steps:
      - {target: openai/gpt-4o}
clients:
  - {id: app, secret: env:T_CLIENT, models: ["*"]}
`

// docBadType has a provider of an unknown type.
const docBadType = `providers:
  - name: openai
    type: openai-ng
    base_url: http://127.0.0.1:1/v1
    keys: [{id: primary, secret: env:T_K1}]
    models: [{name: gpt-4o}]
`

// waitRouting polls /readyz until the admin service routes with version.
func (e *env) waitRouting(version int) {
	e.t.Helper()
	testkit.CheckFor(e.t, testTimeout, 10*time.Millisecond, func() error {
		a, err := servicetest.Get(e.base + "/readyz")
		if err != nil {
			return err
		}
		if got, _ := a.Body["routing_version"].(float64); int(got) != version || a.Status != 200 {
			return fmt.Errorf("readyz %d %v", a.Status, a.Body)
		}
		return nil
	})
}

// doRaw sends body with a content type.
func (e *env) doRaw(method, path, token, contentType, body string) reply {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: raw, header: resp.Header}
	r.body = decodeObject(raw)
	return r
}

// configKV is the switchyard_config bucket, read on the stand-in proxy's
// connection.
func (e *env) configKV() jetstream.KeyValue {
	e.t.Helper()
	js, err := jetstream.New(e.pnc)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bus.BucketConfig)
	if err != nil {
		e.t.Fatal(err)
	}
	return kv
}

// bucketKeys lists the bucket's keys with their last revision.
func (e *env) bucketKeys() map[string]uint64 {
	e.t.Helper()
	kv := e.configKV()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	keys, err := kv.Keys(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, k := range keys {
		ent, err := kv.Get(ctx, k)
		if err != nil {
			e.t.Fatal(err)
		}
		out[k] = ent.Revision()
	}
	return out
}

func num(v any) uint64 {
	f, _ := v.(float64)
	return uint64(f)
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestConfigImportedAndShown: the admin service imports its file's
// routing as version 1 when the fleet has none, routes with it, and
// shows it.
func TestConfigImportedAndShown(t *testing.T) {
	e := startConfigEnv(t)
	r := e.do("GET", "/admin/config", readToken, nil)
	r.expect(t, 200, "")
	if num(r.body["version"]) != 1 || r.body["source"] != "import" || r.body["active"] != true ||
		num(r.body["active_revision"]) == 0 || num(r.body["applied_version"]) != 1 || r.body["by"] != e.svc.member.Instance {
		t.Fatalf("GET /admin/config = %s", r.raw)
	}
	doc, _ := r.body["document"].(string)
	if !strings.Contains(doc, "env:T_K1") || !strings.Contains(doc, "chains:") || strings.Contains(doc, "tokens") {
		t.Errorf("document:\n%s", doc)
	}
	for _, secret := range []string{"sk-old-primary", "sk-old-secondary", clientKey, opToken} {
		if strings.Contains(string(r.raw), secret) {
			t.Errorf("GET /admin/config shows a secret")
		}
	}
	r = e.do("GET", "/admin/config/versions", readToken, nil)
	r.expect(t, 200, "")
	if vs := list(r.body["versions"]); len(vs) != 1 || obj(vs[0])["document"] != nil || num(r.body["active_version"]) != 1 {
		t.Errorf("versions = %s", r.raw)
	}
	r = e.do("GET", "/admin/config/routing", readToken, nil)
	r.expect(t, 200, "")
	chains := list(r.body["chains"])
	if num(r.body["version"]) != 1 || len(chains) != 1 || len(list(obj(chains[0])["steps"])) != 2 {
		t.Errorf("routing = %s", r.raw)
	}
	e.do("GET", "/admin/config/versions/9", readToken, nil).expect(t, 404, codeNotFound)
	e.do("GET", "/admin/config/versions/x", readToken, nil).expect(t, 400, codeBadRequest)
	e.do("GET", "/admin/config/diff?from=x", readToken, nil).expect(t, 400, codeBadRequest)
}

// TestConfigPreviewActivateRollback: the operator workflow end to end:
// an invalid document is refused with the loader's messages and never
// written; a valid one previews as a diff, activates, reaches a stand-in
// follower and this instance; a stale base is a 409; the same document
// again changes nothing; a rollback restores version 1 as a new version.
func TestConfigPreviewActivateRollback(t *testing.T) {
	e := startConfigEnv(t)
	follower := e.follow()

	// an invalid document: the loader's messages, nothing written
	before := e.bucketKeys()
	r := e.doRaw("POST", "/admin/config/preview", opToken, "application/yaml", docBadType)
	r.expect(t, 200, "")
	errs := list(r.body["errors"])
	if r.body["valid"] != false || len(errs) == 0 || !strings.Contains(fmt.Sprint(errs), `candidate: providers[0].type: unknown type "openai-ng"`) {
		t.Fatalf("preview of an invalid document = %s", r.raw)
	}
	r = e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": docBadType, "comment": "try"})
	r.expect(t, 400, codeInvalidConfig)
	if msg := fmt.Sprint(obj(r.body["error"])["errors"]); !strings.Contains(msg, "unknown type") {
		t.Errorf("activate invalid: %s", r.raw)
	}
	e.doRaw("POST", "/admin/config/preview", opToken, "application/yaml", "nats: {url: nats://x}\n").expect(t, 200, "")
	// valid key by key, but not once merged with the defaults, as every
	// service builds its hold policy: refused like any invalid document
	ladder := strings.Replace(docV2, "providers:", "resilience:\n  ladder:\n    rate_limit: {base: 10m}\nproviders:", 1)
	r = e.doRaw("POST", "/admin/config/preview", opToken, "application/yaml", ladder)
	r.expect(t, 200, "")
	if r.body["valid"] != false || !strings.Contains(fmt.Sprint(r.body["errors"]), "candidate: resilience.ladder.rate_limit: ceiling 5m0s is below base 10m0s") {
		t.Errorf("preview of a ladder below its default ceiling = %s", r.raw)
	}
	e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": ladder}).expect(t, 400, codeInvalidConfig)
	for _, doc := range []string{"providers: [\n", "- a\n- b\n"} { // not a document: the same answer
		r = e.doRaw("POST", "/admin/config/preview", opToken, "application/yaml", doc)
		r.expect(t, 200, "")
		if r.body["valid"] != false || len(list(r.body["errors"])) == 0 || r.body["diff"] != nil {
			t.Errorf("preview of %q = %s", doc, r.raw)
		}
	}
	if after := e.bucketKeys(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the bucket changed: %v -> %v", before, after)
	}
	e.do("GET", "/admin/config", readToken, nil).expect(t, 200, "")

	// preview a valid document: its diff against version 1 and the base
	r = e.doRaw("POST", "/admin/config/preview", opToken, "application/yaml", docV2)
	r.expect(t, 200, "")
	diff := obj(r.body["diff"])
	if r.body["valid"] != true || len(list(r.body["errors"])) != 0 || num(r.body["active_version"]) != 1 || num(r.body["base"]) == 0 {
		t.Fatalf("preview = %s", r.raw)
	}
	paths := fmt.Sprint(list(diff["changes"]))
	for _, p := range []string{"providers.openai.keys.third", "chains.default.steps[1]", "trip_on.global-rule"} {
		if !strings.Contains(paths, p) {
			t.Errorf("diff lacks %s: %s", p, paths)
		}
	}
	base := num(r.body["base"])

	// activate it, based on what was previewed
	r = e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": docV2, "comment": "third key", "base": base})
	r.expect(t, 200, "")
	v := obj(r.body["version"])
	if r.body["changed"] != true || r.body["applied"] != true || num(v["version"]) != 2 || v["source"] != "activate" ||
		v["by"] != "oncall" || v["comment"] != "third key" || num(v["replaces"]) != 1 {
		t.Fatalf("activate = %s", r.raw)
	}
	follower.waitFor(t, 2, func(cfg *config.Config) error {
		if p := cfg.Provider("openai"); p == nil || len(p.Keys) != 3 {
			return fmt.Errorf("openai keys: %+v", p)
		}
		return nil
	})
	// this instance shows version 2
	st := e.do("GET", "/admin/providers/status", readToken, nil)
	if !strings.Contains(string(st.raw), `"id":"third"`) || strings.Contains(string(st.raw), "global-rule") {
		t.Errorf("status after the activation: %s", st.raw)
	}
	e.waitRouting(2)

	// a second activation based on version 1's revision loses: 409
	r = e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": docV2 + "aliases: {fast: openai/gpt-4o}\n", "base": base})
	r.expect(t, 409, codeConflict)
	// the same document again: nothing to do
	r = e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": docV2})
	r.expect(t, 200, "")
	if r.body["changed"] != false || num(obj(r.body["version"])["version"]) != 2 {
		t.Errorf("activate unchanged = %s", r.raw)
	}

	// rollback to version 1: a new version 3 from version 1
	e.do("POST", "/admin/config/rollback", opToken, map[string]any{"version": 9}).expect(t, 404, codeNotFound)
	e.do("POST", "/admin/config/rollback", opToken, map[string]any{}).expect(t, 400, codeBadRequest)
	r = e.do("POST", "/admin/config/rollback", opToken, map[string]any{"version": 1, "comment": "back"})
	r.expect(t, 200, "")
	v = obj(r.body["version"])
	if num(v["version"]) != 3 || v["source"] != "rollback" || num(v["from_version"]) != 1 || r.body["applied"] != true {
		t.Fatalf("rollback = %s", r.raw)
	}
	follower.waitFor(t, 3, func(cfg *config.Config) error {
		if p := cfg.Provider("openai"); p == nil || len(p.Keys) != 2 {
			return fmt.Errorf("openai keys: %+v", p)
		}
		return nil
	})

	// history, newest first; one version with its document; diffs
	r = e.do("GET", "/admin/config/versions", readToken, nil)
	var got []string
	for _, x := range list(r.body["versions"]) {
		got = append(got, fmt.Sprintf("%v:%v:%v", num(obj(x)["version"]), obj(x)["source"], obj(x)["active"]))
	}
	if strings.Join(got, " ") != "3:rollback:true 2:activate:false 1:import:false" {
		t.Errorf("history %v", got)
	}
	r = e.do("GET", "/admin/config/versions/2", readToken, nil)
	if r.body["document"] != docV2 || r.body["active"] != false {
		t.Errorf("version 2 = %s", r.raw)
	}
	r = e.do("GET", "/admin/config/diff", readToken, nil) // the active one against its predecessor
	r.expect(t, 200, "")
	if num(r.body["from"]) != 2 || num(r.body["to"]) != 3 || !strings.Contains(string(r.raw), `"op":"removed","path":"providers.openai.keys.third"`) {
		t.Errorf("diff = %s", r.raw)
	}
	r = e.do("GET", "/admin/config/diff?from=1&to=3", readToken, nil)
	if len(list(r.body["changes"])) != 0 {
		t.Errorf("diff 1..3 = %s", r.raw)
	}
	r = e.do("GET", "/admin/config/diff?from=0&to=1", readToken, nil)
	if num(r.body["removed"]) != 0 || num(r.body["added"]) == 0 {
		t.Errorf("diff 0..1 = %s", r.raw)
	}

	// every write was a config event
	next, stop := e.stream("?kind=config&since=10m")
	defer stop()
	var sources []string
	for range 3 {
		name, ev := next()
		if name != "config" {
			t.Fatalf("event %s", name)
		}
		sources = append(sources, ev.Source)
	}
	if strings.Join(sources, " ") != "import activate rollback" {
		t.Errorf("config events %v", sources)
	}
}

// TestConfigConcurrentActivations: two operators activate different
// documents based on the same revision at once: one wins, the other gets
// 409 and its document never becomes active.
func TestConfigConcurrentActivations(t *testing.T) {
	e := startConfigEnv(t)
	base := num(e.do("GET", "/admin/config", readToken, nil).body["active_revision"])
	docs := []string{docV2, docV2 + "aliases: {fast: openai/gpt-4o}\n"}
	replies := make([]reply, len(docs))
	var wg sync.WaitGroup
	for i, d := range docs {
		wg.Go(func() {
			replies[i] = e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": d, "base": base})
		})
	}
	wg.Wait()
	won, lost := -1, -1
	for i, r := range replies {
		switch {
		case r.status == 200:
			won = i
		case r.status == 409 && r.errCode() == codeConflict:
			lost = i
		default:
			t.Fatalf("activation %d: %d %s", i, r.status, r.raw)
		}
	}
	if won < 0 || lost < 0 {
		t.Fatalf("want one 200 and one 409: %d %s / %d %s", replies[0].status, replies[0].raw, replies[1].status, replies[1].raw)
	}
	active := e.do("GET", "/admin/config", readToken, nil)
	if active.body["document"] != docs[won] {
		t.Errorf("active document is not the winner's: %s", active.raw)
	}
	// the loser's version is not listed (its number stays taken)
	for _, x := range list(e.do("GET", "/admin/config/versions", readToken, nil).body["versions"]) {
		if num(obj(x)["version"]) != 1 && num(obj(x)["version"]) != num(obj(replies[won].body["version"])["version"]) {
			t.Errorf("a version of the losing activation is listed: %v", x)
		}
	}
}

// TestStepOfEscapedChain: a chain whose name must be escaped in a path
// (the dashboard and swctl escape it) is found by its step switch.
func TestStepOfEscapedChain(t *testing.T) {
	e := startEnvWith(t, envOptions{withKey: true, edit: func(y string) string {
		return y + "chains:\n  \"eu:fast lane\":\n    steps:\n      - {target: openai/gpt-4o}\n      - {target: local/llama}\n"
	}})
	e.waitRouting(1)
	r := e.do("POST", "/admin/config/chains/"+url.PathEscape("eu:fast lane")+"/steps/1", opToken, map[string]any{"active": false})
	r.expect(t, 200, "")
	if ed := obj(r.body["version"])["edit"]; ed != `chains["eu:fast lane"].steps[1].active: true -> false` {
		t.Errorf("edit %q", ed)
	}
}

// TestStatusDisabledKey: a key switched off is listed as such, and a
// provider whose every other key is held is offline.
func TestStatusDisabledKey(t *testing.T) {
	e := startConfigEnv(t)
	e.do("PATCH", "/admin/config/providers/openai/keys/secondary", opToken, map[string]any{"enabled": false}).expect(t, 200, "")
	e.fail("openai", "primary", "gpt-4o", credentialRejected, 401)
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		r := e.do("GET", "/admin/providers/status", readToken, nil)
		for _, p := range list(r.body["providers"]) {
			if obj(p)["name"] != "openai" {
				continue
			}
			keys := list(obj(p)["keys"])
			if st := obj(p)["status"]; st != adminapi.StatusOffline || obj(keys[0])["enabled"] != true || obj(keys[1])["enabled"] != false {
				return fmt.Errorf("status %v, keys %v", st, keys)
			}
			return nil
		}
		return errors.New("no openai")
	})
}

// TestConfigEdits: the small edits, each a new version through
// Store.Edit, shown at once by this instance.
func TestConfigEdits(t *testing.T) {
	e := startConfigEnv(t)
	step := func(active bool) reply {
		return e.do("POST", "/admin/config/chains/default/steps/1", opToken, map[string]any{"active": active, "comment": "drain local"})
	}
	r := step(false)
	r.expect(t, 200, "")
	v := obj(r.body["version"])
	if num(v["version"]) != 2 || v["source"] != "edit" || num(v["from_version"]) != 1 || v["edit"] != "chains.default.steps[1].active: true -> false" {
		t.Fatalf("step off = %s", r.raw)
	}
	rv := e.do("GET", "/admin/config/routing", readToken, nil)
	steps := list(obj(list(rv.body["chains"])[0])["steps"])
	if num(rv.body["version"]) != 2 || obj(steps[1])["active"] != false || obj(steps[0])["active"] != true {
		t.Errorf("routing after the step edit: %s", rv.raw)
	}
	if r := step(false); r.status != 200 || r.body["changed"] != false {
		t.Errorf("step off again: %d %s", r.status, r.raw)
	}
	if r := step(true); num(obj(r.body["version"])["version"]) != 3 {
		t.Errorf("step on: %s", r.raw)
	}

	// keys: weight and priority; a new key by reference only
	r = e.do("PATCH", "/admin/config/providers/openai/keys/secondary", opToken, map[string]any{"weight": 4, "priority": 1})
	r.expect(t, 200, "")
	st := e.do("GET", "/admin/providers/status", readToken, nil)
	if !strings.Contains(string(st.raw), `"id":"secondary","fingerprint":"`) || !strings.Contains(string(st.raw), `"priority":1,"weight":4`) {
		t.Errorf("status after the key edit: %s", st.raw)
	}
	// switch a key off: it stays configured
	r = e.do("PATCH", "/admin/config/providers/openai/keys/primary", opToken, map[string]any{"enabled": false})
	r.expect(t, 200, "")
	if ed := obj(r.body["version"])["edit"]; ed != "added providers.openai.keys.primary.enabled" {
		t.Errorf("key off: edit %q", ed)
	}
	rv = e.do("GET", "/admin/config/routing", readToken, nil)
	if !strings.Contains(string(rv.raw), `{"id":"primary","priority":0,"weight":1,"enabled":false}`) {
		t.Errorf("routing after the key was switched off: %s", rv.raw)
	}
	const plain = "sk-live-do-not-echo-0123"
	r = e.do("POST", "/admin/config/providers/openai/keys", opToken, map[string]any{"id": "third", "secret": plain})
	r.expect(t, 400, codeBadRequest)
	if strings.Contains(string(r.raw), plain) {
		t.Fatalf("the answer echoes the plain secret: %s", r.raw)
	}
	r = e.do("POST", "/admin/config/providers/openai/keys", opToken, map[string]any{"id": "third", "secret": "env:T_UNSET_ON_ADMIN"})
	r.expect(t, 400, codeInvalidConfig)
	if !strings.Contains(string(r.raw), "T_UNSET_ON_ADMIN is not set") {
		t.Errorf("unresolvable secret: %s", r.raw)
	}
	r = e.do("POST", "/admin/config/providers/openai/keys", opToken, map[string]any{"id": "third", "secret": "env:T_K3", "weight": 2})
	r.expect(t, 200, "")
	if !strings.Contains(fmt.Sprint(obj(r.body["version"])["edit"]), "added providers.openai.keys.third") {
		t.Errorf("add key = %s", r.raw)
	}
	e.do("POST", "/admin/config/providers/openai/keys", opToken, map[string]any{"id": "third", "secret": "env:T_K3"}).expect(t, 400, codeInvalidConfig)

	// trip rules
	r = e.do("PUT", "/admin/config/providers/local/trip_on", opToken, map[string]any{"rules": map[string]any{
		"gpu-oom": map[string]any{"match": "CUDA out of memory", "class": "transient", "ttl": "1m"}}})
	r.expect(t, 200, "")
	st = e.do("GET", "/admin/providers/status", readToken, nil)
	if !strings.Contains(string(st.raw), "CUDA out of memory") {
		t.Errorf("status after the trip_on edit: %s", st.raw)
	}
	e.do("PUT", "/admin/config/providers/local/trip_on", opToken, map[string]any{"rules": map[string]any{
		"bad": map[string]any{"match": "x", "class": "no-such-class"}}}).expect(t, 400, codeInvalidConfig)
	e.do("PUT", "/admin/config/providers/local/trip_on", opToken, map[string]any{}).expect(t, 400, codeBadRequest)

	// unknown names: 404 in the admin error format
	for _, tt := range []struct {
		name, method, path string
		body               any
	}{
		{"chain", "POST", "/admin/config/chains/nope/steps/0", map[string]any{"active": false}},
		{"step", "POST", "/admin/config/chains/default/steps/7", map[string]any{"active": false}},
		{"provider of a key", "PATCH", "/admin/config/providers/nope/keys/primary", map[string]any{"weight": 1}},
		{"key", "PATCH", "/admin/config/providers/openai/keys/nope", map[string]any{"weight": 1}},
		{"provider of a new key", "POST", "/admin/config/providers/nope/keys", map[string]any{"id": "k", "secret": "env:T_K3"}},
		{"provider of trip rules", "PUT", "/admin/config/providers/nope/trip_on", map[string]any{"rules": nil}},
	} {
		t.Run(tt.name, func(t *testing.T) { e.do(tt.method, tt.path, opToken, tt.body).expect(t, 404, codeNotFound) })
	}
	e.do("POST", "/admin/config/chains/default/steps/x", opToken, map[string]any{"active": false}).expect(t, 400, codeBadRequest)
	e.do("POST", "/admin/config/chains/default/steps/0", opToken, map[string]any{}).expect(t, 400, codeBadRequest)
	e.do("PATCH", "/admin/config/providers/openai/keys/primary", opToken, map[string]any{"disabled": true}).expect(t, 400, codeBadRequest)

	// a stale base: 409
	e.do("POST", "/admin/config/chains/default/steps/1", opToken, map[string]any{"active": false, "base": 1}).expect(t, 409, codeConflict)

	r = e.do("GET", "/admin/config/versions", readToken, nil)
	if n := len(list(r.body["versions"])); n != 7 {
		t.Errorf("%d versions after 6 edits and the import: %s", n, r.raw)
	}
}

// TestConfigAuth: reads need a token, writes (and the preview) an
// operator token.
func TestConfigAuth(t *testing.T) {
	e := startConfigEnv(t)
	reads := []string{"/admin/config", "/admin/config/routing", "/admin/config/versions", "/admin/config/versions/1", "/admin/config/diff"}
	for _, p := range reads {
		e.do("GET", p, "", nil).expect(t, 401, codeUnauthorized)
		e.do("GET", p, readToken, nil).expect(t, 200, "")
	}
	writes := []struct{ method, path string }{
		{"POST", "/admin/config/preview"}, {"POST", "/admin/config/activate"}, {"POST", "/admin/config/rollback"},
		{"POST", "/admin/config/chains/default/steps/1"}, {"PATCH", "/admin/config/providers/openai/keys/primary"},
		{"POST", "/admin/config/providers/openai/keys"}, {"PUT", "/admin/config/providers/openai/trip_on"},
	}
	for _, w := range writes {
		e.do(w.method, w.path, "", map[string]any{}).expect(t, 401, codeUnauthorized)
		e.do(w.method, w.path, readToken, map[string]any{"active": false}).expect(t, 403, codeForbidden)
	}
	if n := len(list(e.do("GET", "/admin/config/versions", readToken, nil).body["versions"])); n != 1 {
		t.Errorf("%d versions after refused writes", n)
	}
	// the preview takes documents only
	e.doRaw("POST", "/admin/config/preview", opToken, "application/x-www-form-urlencoded", docV2).expect(t, 415, codeUnsupportedMedia)
	e.doRaw("POST", "/admin/config/preview", opToken, "application/yaml", "  ").expect(t, 400, codeBadRequest)
	r := e.doRaw("POST", "/admin/config/preview", opToken, "application/json", `{"providers":[]}`)
	if r.status != 200 || r.body["valid"] != true {
		t.Errorf("JSON preview: %d %s", r.status, r.raw)
	}
}

// TestConfigWritesWithoutNATS: with NATS gone the writes answer 503 and
// nothing lands once it is back.
func TestConfigWritesWithoutNATS(t *testing.T) {
	e := startEnvWith(t, envOptions{withKey: true, fileStore: true, edit: chainYAML})
	e.waitRouting(1)
	stopServer(e)
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		if e.svc.natsUp() {
			return fmt.Errorf("still connected")
		}
		return nil
	})
	e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": docV2}).expect(t, 503, codeNATSUnavailable)
	e.do("POST", "/admin/config/chains/default/steps/1", opToken, map[string]any{"active": false}).expect(t, 503, codeNATSUnavailable)
	e.do("GET", "/admin/config", readToken, nil).expect(t, 503, codeNATSUnavailable)
	// an invalid document is still refused for what it is
	e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": docBadType}).expect(t, 400, codeInvalidConfig)
	restartServer(e)
	testkit.CheckFor(t, testTimeout, 20*time.Millisecond, func() error {
		r := e.do("GET", "/admin/config", readToken, nil)
		if r.status != 200 {
			return fmt.Errorf("%d %s", r.status, r.raw)
		}
		if num(r.body["version"]) != 1 {
			return fmt.Errorf("a refused write landed: %s", r.raw)
		}
		return nil
	})
}

// follower is a stand-in service following the fleet's routing
// configuration on its own connection (routingdoc.Follow), as a proxy
// does.
type follower struct {
	mu      sync.Mutex
	applied map[uint64]*config.Config
}

func (e *env) follow() *follower {
	e.t.Helper()
	f := &follower{applied: map[uint64]*config.Config{}}
	st := routingdoc.New(e.pnc, e.configKV(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = routingdoc.Follow(ctx, st, routingdoc.FollowOptions{Base: e.cfg, Environ: testEnviron,
			Apply: func(cfg *config.Config, v uint64) error {
				f.mu.Lock()
				defer f.mu.Unlock()
				f.applied[v] = cfg
				return nil
			}})
	}()
	e.t.Cleanup(func() { cancel(); <-done })
	return f
}

// waitFor waits until the follower applied version, then checks it.
func (f *follower) waitFor(t *testing.T, version uint64, check func(*config.Config) error) {
	t.Helper()
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		f.mu.Lock()
		cfg := f.applied[version]
		f.mu.Unlock()
		if cfg == nil {
			return fmt.Errorf("version %d not applied", version)
		}
		return check(cfg)
	})
}

func decodeObject(raw []byte) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return m
}

// TestConfigOpenAPI: the document describes every field of the
// configuration routes' answers and bodies, and no other.
func TestConfigOpenAPI(t *testing.T) {
	full := adminapi.ConfigVersion{ActiveRevision: 3, Document: "providers: []\n"}
	fail := &routingdoc.Failure{Version: 4, Error: "x"}
	rv := routingView{RoutingError: fail}
	step := false
	for schema, v := range map[string]any{
		"ConfigVersion":    full,
		"ActiveConfig":     adminapi.ActiveConfig{ConfigVersion: full, RoutingError: fail},
		"RoutingFailure":   fail,
		"ConfigDiff":       adminapi.ConfigDiff{},
		"Changes":          routingdoc.Changes{},
		"Change":           routingdoc.Change{Before: 1, After: 2},
		"Preview":          adminapi.Preview{},
		"ConfigWrite":      adminapi.ConfigWrite{Instances: []adminapi.InstanceOutcome{{Error: "x"}}, Summary: &adminapi.OutcomeSummary{}},
		"InstanceOutcome":  adminapi.InstanceOutcome{Error: "x"},
		"OutcomeSummary":   adminapi.OutcomeSummary{},
		"ActivateRequest":  activateRequest{Document: []byte(`"x"`)},
		"RollbackRequest":  rollbackRequest{},
		"StepRequest":      stepRequest{Active: &step},
		"KeyFieldsRequest": keyFieldsRequest{},
		"AddKeyRequest":    addKeyRequest{},
		"TripRulesRequest": tripRulesRequest{Rules: []byte(`{}`)},
		"RoutingView":      rv,
		"ChainView":        chainView{},
		"StepView":         stepView{},
		"ProviderConfig":   providerConfig{},
		"KeyConfig":        keyConfigView{},
		"TripRule":         tripRuleView{TTL: "1m"},
	} {
		checkSchema(t, schema, v)
	}
}

// TestConfigNeverShowsInlineSecrets: a version put in the bucket by hand
// with a secret written inline (every write refuses one) is shown with
// the secret masked.
func TestConfigNeverShowsInlineSecrets(t *testing.T) {
	e := startConfigEnv(t)
	const plain = "sk-inline-0123456789abcdef"
	doc := "providers:\n  - name: openai\n    type: openai\n    keys:\n      - {id: primary, secret: " + plain + "}\n      - {id: second, secret: env:T_K2}\n    models: [{name: gpt-4o}]\n"
	v := routingdoc.Version{V: 1, Version: 9, Document: doc, SHA256: routingdoc.Sum([]byte(doc)), By: "hand", At: time.Now(), Source: routingdoc.SourceActivate}
	raw, _ := json.Marshal(v)
	if _, err := e.configKV().Put(context.Background(), routingdoc.VersionKey(9), raw); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", "/admin/config/versions/9", readToken, nil)
	r.expect(t, 200, "")
	if strings.Contains(string(r.raw), plain) || !strings.Contains(r.body["document"].(string), "[redacted]") ||
		!strings.Contains(r.body["document"].(string), "env:T_K2") {
		t.Fatalf("version 9 = %s", r.raw)
	}
	if d := e.do("GET", "/admin/config/diff?from=1&to=9", readToken, nil); d.status != 200 || strings.Contains(string(d.raw), plain) {
		t.Errorf("diff shows the secret: %s", d.raw)
	}
	rb := e.do("POST", "/admin/config/rollback", opToken, map[string]any{"version": 9})
	rb.expect(t, 400, codeInvalidConfig)
	if strings.Contains(string(rb.raw), plain) {
		t.Errorf("the refusal shows the secret: %s", rb.raw)
	}
	if r := e.do("GET", "/admin/config", readToken, nil); num(r.body["version"]) != 1 {
		t.Errorf("the hand-put version became active: %s", r.raw)
	}
}

// TestConfigKeepsRuntimeFields: a document without the health checks' path
// and method (a file re-imported) keeps the active version's; preview says
// so.
func TestConfigKeepsRuntimeFields(t *testing.T) {
	e := startConfigEnv(t)
	withPath := strings.Replace(docV2, "  - name: local\n    type: vllm\n", "  - name: local\n    type: vllm\n    health_check: {path: /health, method: GET}\n", 1)
	e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": withPath, "comment": "a path"}).expect(t, 200, "")
	r := e.doRaw("POST", "/admin/config/preview", opToken, "application/yaml", docV2)
	r.expect(t, 200, "")
	if w := fmt.Sprint(list(r.body["warnings"])); !strings.Contains(w, "providers.local.health_check.path kept") {
		t.Errorf("preview warnings %s", w)
	}
	e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": docV2 + "aliases: {fast: openai/gpt-4o}\n", "comment": "re-import"}).expect(t, 200, "")
	r = e.do("GET", "/admin/config", readToken, nil)
	r.expect(t, 200, "")
	if doc, _ := r.body["document"].(string); !strings.Contains(doc, "path: /health") || !strings.Contains(doc, "method: GET") || !strings.Contains(doc, "fast:") {
		t.Errorf("the active document lost the runtime fields (or the change):\n%s", doc)
	}
}

// TestConfigRefusesHostSecrets: a version whose secret references reach
// past this instance's credentials.references (its own credentials key,
// an admin token, a host file) is refused at preview and activation with
// 400 naming the reference, nothing written, and the answer tells nothing
// of a file (its size, its bytes, whether it exists).
func TestConfigRefusesHostSecrets(t *testing.T) {
	e := startConfigEnv(t)
	hostFile := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(hostFile, []byte("root:$6$salt$hash:19000:0:99999:7:::\nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	exfil := func(ref string) string {
		return "providers:\n  - name: exfil\n    type: openai-compatible\n    base_url: http://127.0.0.1:1/v1\n" +
			"    keys: [{id: k1, secret: \"" + ref + "\"}]\n    models: [{name: m}]\n"
	}
	before := e.bucketKeys()
	for _, ref := range []string{"env:T_CRED", "env:T_OP", "env:HOME", "file:" + hostFile, "file:/etc/shadow", "file:/no/such/x"} {
		t.Run(ref, func(t *testing.T) {
			doc := exfil(ref)
			want := "providers[0].keys[0].secret: " + ref + ": not allowed on this instance (credentials.references)"
			r := e.doRaw("POST", "/admin/config/preview", opToken, "application/yaml", doc)
			r.expect(t, 200, "")
			if r.body["valid"] != false || !strings.Contains(fmt.Sprint(r.body["errors"]), want) {
				t.Errorf("preview = %s", r.raw)
			}
			a := e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": doc, "comment": "exfil"})
			a.expect(t, 400, codeInvalidConfig)
			if !strings.Contains(string(a.raw), want) {
				t.Errorf("activate = %s", a.raw)
			}
			for _, leak := range []string{"offset", "byte 0x", " of 4", "root:", "hash", "exist", credKeyHex, opToken} {
				if strings.Contains(string(r.raw)+string(a.raw), leak) {
					t.Errorf("the answers tell %q: %s %s", leak, r.raw, a.raw)
				}
			}
		})
	}
	if after := e.bucketKeys(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the bucket changed: %v -> %v", before, after)
	}
	if r := e.do("GET", "/admin/config", readToken, nil); num(r.body["version"]) != 1 {
		t.Errorf("a refused version became active: %s", r.raw)
	}
	// an allowed reference of a key added by the operator still works
	r := e.doRaw("POST", "/admin/config/preview", opToken, "application/yaml", exfil("env:T_K3"))
	if r.body["valid"] != true {
		t.Errorf("preview of an allowed reference = %s", r.raw)
	}
}

// trackerFollow follows the routing configuration as every service does
// (routingdoc.Tracker.Follow, reporting on NATS), as the instance named
// instance of a service whose host has environ.
func (e *env) trackerFollow(service, instance string, environ []string) *routingdoc.Tracker {
	e.t.Helper()
	nc, err := nats.Connect(e.ns.ClientURL())
	if err != nil {
		e.t.Fatal(err)
	}
	tr := routingdoc.NewTracker()
	st := routingdoc.New(nc, e.configKV(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tr.Follow(ctx, st, routingdoc.FollowOptions{Base: e.cfg, Environ: environ, Service: service, Instance: instance,
			Apply: func(*config.Config, uint64) error { return nil }})
	}()
	e.t.Cleanup(func() { cancel(); <-done; nc.Close() })
	<-tr.Loaded()
	return tr
}

// TestActivationSaysWhoApplied: an activation that some instances refuse
// (a variable set on the admin host only) says so: which instances
// applied it and which refused it and why, in the answer and in GET
// /admin/config/instances.
func TestActivationSaysWhoApplied(t *testing.T) {
	e := startConfigEnv(t)
	var lacking []string // the proxy host has no T_K3
	for _, kv := range testEnviron {
		if !strings.HasPrefix(kv, "T_K3=") {
			lacking = append(lacking, kv)
		}
	}
	e.trackerFollow("proxy", "proxy-a", lacking)
	e.trackerFollow("proxy", "proxy-b", testEnviron)

	r := e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": docV2, "comment": "third key"})
	r.expect(t, 200, "")
	version := num(obj(r.body["version"])["version"])
	check := func(what string, body map[string]any, raw []byte) {
		t.Helper()
		got := map[string]map[string]any{}
		for _, it := range list(body["instances"]) {
			o := obj(it)
			got[fmt.Sprint(o["instance"])] = o
		}
		if a := got["proxy-a"]; a == nil || a["outcome"] != "refused" || a["service"] != "proxy" ||
			!strings.Contains(fmt.Sprint(a["error"]), "env:T_K3") || num(a["routing_version"]) != 1 {
			t.Errorf("%s: proxy-a: %v (%s)", what, a, raw)
		}
		if b := got["proxy-b"]; b == nil || b["outcome"] != "applied" || num(b["routing_version"]) != version {
			t.Errorf("%s: proxy-b: %v (%s)", what, b, raw)
		}
		var admins int
		for id, o := range got {
			if o["service"] == "admin" {
				admins++
				if o["outcome"] != "applied" {
					t.Errorf("%s: the admin %s: %v", what, id, o)
				}
			}
		}
		sum := obj(body["summary"])
		if admins != 1 || num(sum["applied"]) != 2 || num(sum["refused"]) != 1 || num(sum["pending"]) != 0 {
			t.Errorf("%s: %d admins, summary %v (%s)", what, admins, sum, raw)
		}
	}
	check("activate", r.body, r.raw)
	g := e.do("GET", "/admin/config/instances", readToken, nil)
	g.expect(t, 200, "")
	if num(g.body["active_version"]) != version {
		t.Errorf("instances: active_version %v, want %d", g.body["active_version"], version)
	}
	check("instances", g.body, g.raw)
}

// TestConfigRefusesBadGuardrails: a routing version whose guardrails a
// proxy could not compile (a regex that matches the empty string, a
// moderation model that is not one, a webhook secret given inline, an
// attachment to no guardrail) is refused by preview and activation with
// each key named, and nothing is written.
func TestConfigRefusesBadGuardrails(t *testing.T) {
	e := startConfigEnv(t)
	before := e.bucketKeys()
	doc := docV2 + `guardrails:
  - {name: loose, regex: ['x?']}
  - {name: mod, moderation: {model: openai/gpt-4o}}
  - {name: hook, webhook: {url: 'https://guard.example/check', secret: whsec-inline-value}}
`
	doc = strings.Replace(doc, `models: ["*"]}`, `models: ["*"], guardrails: [loose, nope]}`, 1)
	wants := []string{
		`candidate: guardrails[0].regex[0]: can match the empty string`,
		`candidate: guardrails[1].moderation.model: "openai/gpt-4o" is a model of kind "chat"`,
		`candidate: guardrails[2].webhook.secret: secrets are referenced, not inline`,
		`candidate: clients[0].guardrails[1]: no guardrail named "nope"`,
	}
	r := e.doRaw("POST", "/admin/config/preview", opToken, "application/yaml", doc)
	r.expect(t, 200, "")
	errs := fmt.Sprint(list(r.body["errors"]))
	for _, w := range wants {
		if r.body["valid"] != false || !strings.Contains(errs, w) {
			t.Errorf("preview lacks %q: %s", w, r.raw)
		}
	}
	if strings.Contains(string(r.raw), "whsec-inline-value") {
		t.Errorf("the preview quotes the inline secret: %s", r.raw)
	}
	r = e.do("POST", "/admin/config/activate", opToken, map[string]any{"document": doc})
	r.expect(t, 400, codeInvalidConfig)
	if msg := fmt.Sprint(obj(r.body["error"])["errors"]); !strings.Contains(msg, "guardrails[0].regex[0]") || strings.Contains(string(r.raw), "whsec-inline-value") {
		t.Errorf("activate: %s", r.raw)
	}
	if after := e.bucketKeys(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the bucket changed: %v -> %v", before, after)
	}
}

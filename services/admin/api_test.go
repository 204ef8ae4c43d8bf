package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/testkit"

	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
)

func TestAuth(t *testing.T) {
	e := startEnv(t, true)
	tests := []struct {
		name   string
		method string
		path   string
		header string
		status int
		code   string
	}{
		{name: "no token", method: "GET", path: "/admin/holds", status: 401, code: codeUnauthorized},
		{name: "basic scheme", method: "GET", path: "/admin/holds", header: "Basic " + opToken, status: 401, code: codeUnauthorized},
		{name: "wrong token", method: "GET", path: "/admin/holds", header: "Bearer nope", status: 401, code: codeUnauthorized},
		{name: "token prefix", method: "GET", path: "/admin/holds", header: "Bearer " + opToken[:5], status: 401, code: codeUnauthorized},
		{name: "gateway client key", method: "GET", path: "/admin/holds", header: "Bearer " + clientKey, status: 401, code: codeUnauthorized},
		{name: "read token reads", method: "GET", path: "/admin/holds", header: "Bearer " + readToken, status: 200},
		{name: "lower-case scheme", method: "GET", path: "/admin/providers/status", header: "bearer " + readToken, status: 200},
		{name: "read token cannot release", method: "DELETE", path: "/admin/holds/openai.primary", header: "Bearer " + readToken, status: 403, code: codeForbidden},
		{name: "read token cannot pin", method: "POST", path: "/admin/holds", header: "Bearer " + readToken, status: 403, code: codeForbidden},
		{name: "read token cannot reset", method: "POST", path: "/admin/providers/openai/reset", header: "Bearer " + readToken, status: 403, code: codeForbidden},
		{name: "read token cannot rotate", method: "PUT", path: "/admin/providers/openai/keys/primary", header: "Bearer " + readToken, status: 403, code: codeForbidden},
		{name: "client key cannot rotate", method: "PUT", path: "/admin/providers/openai/keys/primary", header: "Bearer " + clientKey, status: 401, code: codeUnauthorized},
		{name: "events without token", method: "GET", path: "/admin/events", status: 401, code: codeUnauthorized},
		{name: "classify without token", method: "POST", path: "/admin/classify", status: 401, code: codeUnauthorized},
		{name: "route explain without token", method: "POST", path: "/admin/route/explain", status: 401, code: codeUnauthorized},
		{name: "openapi is public", method: "GET", path: "/admin/openapi.json", status: 200},
		{name: "unknown admin route", method: "GET", path: "/admin/nope", header: "Bearer " + readToken, status: 404, code: codeNotFound},
		{name: "metrics", method: "GET", path: "/metrics", status: 200},
		{name: "dashboard", method: "GET", path: "/", status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, e.base+tt.path, nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			r := reply{status: resp.StatusCode, body: body}
			r.expect(t, tt.status, tt.code)
			if tt.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}

func TestNoTokensConfigured(t *testing.T) {
	cfg := loadConfig(t, "nats://127.0.0.1:1", true)
	cfg.Admin.Tokens = nil
	svc, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	app := svc.newApp()
	for _, tok := range []string{"", opToken} {
		req := httptest.NewRequest("GET", "/admin/holds", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		reply{status: resp.StatusCode, body: body}.expect(t, 401, codeUnauthorized)
	}
}

func (r reply) raw2() string { return string(r.raw) }

func TestOpenAPIDocument(t *testing.T) {
	e := startEnv(t, true)
	r := e.do("GET", "/admin/openapi.json", "", nil)
	r.expect(t, 200, "")
	paths, _ := r.body["paths"].(map[string]any)
	for _, p := range []string{"/admin/holds", "/admin/holds/{id}", "/admin/providers/status", "/admin/providers/{name}/reset",
		"/admin/providers/{name}/keys/{id}", "/admin/events", "/admin/classify", "/admin/usage", "/admin/clients", "/admin/clients/{id}",
		"/admin/clients/{id}/budget/reset", "/admin/plans", "/metrics", "/admin/route/explain", "/admin/requests", "/admin/requests/{id}",
		"/admin/config", "/admin/config/routing", "/admin/config/versions", "/admin/config/versions/{n}", "/admin/config/diff",
		"/admin/config/preview", "/admin/config/activate", "/admin/config/rollback", "/admin/config/chains/{chain}/steps/{i}",
		"/admin/config/providers/{name}/keys/{id}", "/admin/config/providers/{name}/keys", "/admin/config/providers/{name}/trip_on"} {
		if paths[p] == nil {
			t.Errorf("openapi.json lacks %s", p)
		}
	}
}

func TestHolds(t *testing.T) {
	e := startEnv(t, true)
	e.fail("openai", "primary", "gpt-4o", credentialRejected, 401)
	h := e.waitHold("openai.primary", hold.StateHeld)
	if h["class"] != "credential_rejected" || h["live"] != true || h["remaining_ms"].(float64) <= 0 {
		t.Fatalf("hold = %v", h)
	}
	if strings.Contains(fmt.Sprint(h), "sk-old") {
		t.Fatal("a hold shows a secret")
	}

	t.Run("list and filters", func(t *testing.T) {
		for _, tt := range []struct {
			query string
			n     int
		}{
			{"", 1}, {"?provider=openai", 1}, {"?provider=local", 0}, {"?key=primary", 1}, {"?key=secondary", 0},
			{"?class=credential_rejected", 1}, {"?class=rate_limit", 0}, {"?state=live", 1}, {"?state=released", 0},
		} {
			r := e.do("GET", "/admin/holds"+tt.query, readToken, nil)
			r.expect(t, 200, "")
			if got := len(r.body["holds"].([]any)); got != tt.n {
				t.Errorf("%s: %d holds, want %d", tt.query, got, tt.n)
			}
		}
		e.do("GET", "/admin/holds?class=bogus", readToken, nil).expect(t, 400, codeBadRequest)
		e.do("GET", "/admin/holds?state=bogus", readToken, nil).expect(t, 400, codeBadRequest)
	})
	t.Run("unknown ids", func(t *testing.T) {
		e.do("GET", "/admin/holds/openai.nokey", readToken, nil).expect(t, 404, codeNotFound)
		e.do("DELETE", "/admin/holds/openai.nokey", opToken, nil).expect(t, 404, codeNotFound)
	})
	t.Run("release", func(t *testing.T) {
		e.do("DELETE", "/admin/holds/openai.primary", opToken, nil).expect(t, 204, "")
		e.waitHold("openai.primary", hold.StateReleased)
		// the proxy's table follows: the key ramps back
		testkit.CheckFor(t, testTimeout, 5*time.Millisecond, func() error {
			if _, held := e.proxy.Engine.HeldUntil("openai", "primary", "gpt-4o"); held {
				return fmt.Errorf("still held at the proxy")
			}
			return nil
		})
		e.do("DELETE", "/admin/holds/openai.primary", opToken, nil).expect(t, 404, codeNotFound)
	})
	t.Run("pin", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			body any
		}{
			{"empty", ""},
			{"not json", "{"},
			{"unknown field", `{"provider":"openai","duration":"1m","bogus":1}`},
			{"trailing", `{"provider":"openai","duration":"1m"} {}`},
			{"trailing bracket", `{"provider":"openai","duration":"1m"}]`},
			{"duplicate key", `{"provider":"openai","provider":"local","duration":"1m"}`},
			{"keys differing in case", `{"provider":"openai","Provider":"local","duration":"1m"}`},
			{"a field in another case", `{"PROVIDER":"openai","duration":"1m"}`},
			{"no provider", `{"duration":"1m"}`},
			{"unknown provider", `{"provider":"nope","duration":"1m"}`},
			{"unknown key", `{"provider":"openai","key":"nope","duration":"1m"}`},
			{"unknown model", `{"provider":"openai","model":"gpt-nope","duration":"1m"}`},
			{"no duration", `{"provider":"openai"}`},
			{"bad duration", `{"provider":"openai","duration":"soon"}`},
			{"too long", `{"provider":"openai","duration":"9000h"}`},
			{"both", `{"provider":"openai","duration":"1m","until":"2099-01-01T00:00:00Z"}`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				e.do("POST", "/admin/holds", opToken, tt.body).expect(t, 400, codeBadRequest)
			})
		}
		r := e.do("POST", "/admin/holds", opToken, map[string]any{"provider": "openai", "key": "secondary", "model": "gpt-4o", "duration": "10m", "reason": "migrating"})
		r.expect(t, 201, "")
		if r.body["id"] != "openai.secondary.gpt-4o" || r.body["pinned"] != true || !strings.Contains(r.body["reason"].(string), "oncall") {
			t.Fatalf("pin = %s", r.raw)
		}
		if fp := e.cfg.Provider("openai").Keys[1].Value.Fingerprint(); fp == "" || r.body["fingerprint"] != fp {
			t.Errorf("pin of key secondary names fingerprint %v, want its secret's %q", r.body["fingerprint"], fp)
		}
		testkit.CheckFor(t, testTimeout, 5*time.Millisecond, func() error {
			if e.proxy.Engine.Admit("openai", "secondary", "gpt-4o") != hold.Deny {
				return fmt.Errorf("proxy still admits the pinned target")
			}
			return nil
		})
		// model names with dots are encoded in the id
		r = e.do("POST", "/admin/holds", opToken, map[string]any{"provider": "openai", "model": "gpt-4.1", "duration": "1m"})
		r.expect(t, 201, "")
		id := r.body["id"].(string)
		e.do("GET", "/admin/holds/"+id, readToken, nil).expect(t, 200, "")
		e.do("DELETE", "/admin/holds/"+strings.ReplaceAll(id, "=", "%3D"), opToken, nil).expect(t, 204, "")
	})
}

func TestProvidersStatusAndReset(t *testing.T) {
	e := startEnv(t, true)
	status := func() map[string]map[string]any {
		r := e.do("GET", "/admin/providers/status", readToken, nil)
		r.expect(t, 200, "")
		out := map[string]map[string]any{}
		for _, p := range r.body["providers"].([]any) {
			pm := p.(map[string]any)
			out[pm["name"].(string)] = pm
		}
		return out
	}
	st := status()
	o := st["openai"]
	if o["status"] != adminapi.StatusHealthy || o["circuit_state"] != "closed" || o["health"] != "unknown" {
		t.Fatalf("openai = %v", o)
	}
	if st["local"]["circuit_state"] != "disabled" {
		t.Errorf("local circuit = %v", st["local"]["circuit_state"])
	}
	res := o["resilience"].(map[string]any)
	br := res["breaker"].(map[string]any)
	if br["consecutive_failures"] != 3.0 || br["cooldown"] != "30s" || res["trip_on_source"] != "provider" {
		t.Errorf("resilience = %v", res)
	}
	rules := res["trip_on"].([]any)
	if len(rules) != 1 || rules[0].(map[string]any)["name"] != "org-suspended" || rules[0].(map[string]any)["ttl"] != "2h0m0s" {
		t.Errorf("trip_on = %v", rules)
	}
	if lr := st["local"]["resilience"].(map[string]any)["trip_on"].([]any); len(lr) != 1 || lr[0].(map[string]any)["name"] != "global-rule" {
		t.Errorf("local trip_on = %v", lr)
	}
	keys := o["keys"].([]any)
	if len(keys) != 2 || keys[0].(map[string]any)["fingerprint"] == "" {
		t.Errorf("keys = %v", keys)
	}

	// one key held: degraded; both: offline
	e.fail("openai", "primary", "gpt-4o", credentialRejected, 401)
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		if s := status()["openai"]["status"]; s != adminapi.StatusDegraded {
			return fmt.Errorf("status %v", s)
		}
		return nil
	})
	e.fail("openai", "secondary", "gpt-4o", credentialRejected, 401)
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		if s := status()["openai"]["status"]; s != adminapi.StatusOffline {
			return fmt.Errorf("status %v", s)
		}
		return nil
	})

	// the breaker trips after 3 transient failures: circuit open
	for range 3 {
		e.fail("openai", "primary", "gpt-4o", failure.Result{Class: failure.Transient, Code: "503", Reason: "status 503"}, 503)
	}
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		o := status()["openai"]
		if o["circuit_state"] != "open" || o["status"] != adminapi.StatusCircuitOpen {
			return fmt.Errorf("circuit %v status %v", o["circuit_state"], o["status"])
		}
		return nil
	})
	m := e.do("GET", "/metrics", "", nil)
	for _, want := range []string{`switchyard_circuit_breaker_state{model="",provider="openai"} 2`, `switchyard_holds{class="credential_rejected",scope="key",state="held"} 2`, "switchyard_admin_http_requests_total"} {
		if !strings.Contains(string(m.raw), want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	e.do("POST", "/admin/providers/nope/reset", opToken, nil).expect(t, 404, codeNotFound)
	e.do("POST", "/admin/providers/local/reset", opToken, nil).expect(t, 400, codeNoBreaker)
	e.do("POST", "/admin/providers/openai/reset", opToken, nil).expect(t, 204, "")
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		o := status()["openai"]
		if o["circuit_state"] != "closed" || o["status"] != adminapi.StatusRecovering {
			return fmt.Errorf("circuit %v status %v", o["circuit_state"], o["status"])
		}
		if _, held := e.proxy.Engine.HeldUntil("openai", "primary", "gpt-4o"); held {
			return fmt.Errorf("proxy still holds openai")
		}
		return nil
	})
}

func TestClassify(t *testing.T) {
	e := startEnv(t, true)
	r := e.do("POST", "/admin/classify", readToken, `{"provider":"openai","status":429,"headers":{"retry-after":"20"},"body":{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}}`)
	r.expect(t, 200, "")
	if string(r.raw) != `{"class":"quota_exhausted","scope":"key","retry_after_ms":20000,"code":"insufficient_quota","reason":"provider code insufficient_quota","action":"rotate","holds":true,"soft":false}` {
		t.Errorf("got %s", r.raw)
	}
	// a configured provider name applies its own trip_on rules
	r = e.do("POST", "/admin/classify", readToken, `{"provider":"openai","status":403,"body":{"error":{"message":"organization acme suspended"}}}`)
	if r.body["rule"] != "org-suspended" || r.body["class"] != "credential_rejected" || r.body["hold_ttl_ms"] != 7.2e6 {
		t.Errorf("rule not applied: %s", r.raw)
	}
	r = e.do("POST", "/admin/classify", readToken, `[{"provider":"openai","status":401},{"status":"x"}]`)
	r.expect(t, 200, "")
	if len(r.list) != 2 || r.list[0].(map[string]any)["class"] != "credential_rejected" || r.list[1].(map[string]any)["error"] == nil {
		t.Errorf("array: %s", r.raw)
	}
	// the action is what the proxy does: an attempt that timed out rotates
	r = e.do("POST", "/admin/classify", readToken, `{"provider":"openai","error":"context deadline exceeded"}`)
	if r.body["class"] != "transient" || r.body["action"] != "rotate" {
		t.Errorf("timeout: %s", r.raw)
	}
	e.do("POST", "/admin/classify", readToken, "").expect(t, 400, codeBadRequest)
	e.do("POST", "/admin/classify", readToken, "{nope").expect(t, 400, codeBadRequest)
	e.do("POST", "/admin/classify", readToken, `{"status":5000}`).expect(t, 400, codeBadRequest)
	// the strict-body rule: an unknown field, a key twice or in two
	// spellings (each answered 200, classified as something else)
	for _, body := range []string{`{"statuz":429,"body":"x"}`, `{"status":429,"status":200}`, `{"status":429,"Status":401}`, `{"status":401}]`} {
		e.do("POST", "/admin/classify", readToken, body).expect(t, 400, codeBadRequest)
	}
	r = e.do("POST", "/admin/classify", readToken, `[{"status":429,"Status":401},{"provider":"openai","status":401}]`)
	r.expect(t, 200, "")
	if len(r.list) != 2 || r.list[0].(map[string]any)["error"] != `line 1: decode input: the field "Status" is named more than once (or in two spellings)` ||
		r.list[1].(map[string]any)["class"] != "credential_rejected" {
		t.Errorf("array: %s", r.raw)
	}
}

// TestPinUpstreamName: holds and the proxies' admission use a model's
// configured name, so a pin naming the name sent upstream (which held
// nothing) is refused with the configured names to pin; the configured
// name pins and holds the proxies' traffic, and a name that is both
// configured and another model's upstream pins as configured.
// A pin's reason is one line of text: a control character (a NUL, a line
// break) is refused and nothing is pinned.
func TestPinReasonIsText(t *testing.T) {
	e := startEnvWith(t, envOptions{withKey: true})
	for _, reason := range []string{`drain\u0000now`, `line one\nline two`, `bell\u0007`, "caf\xc3 \xff"} { // JSON escapes; invalid UTF-8
		r := e.do("POST", "/admin/holds", opToken, `{"provider":"openai","duration":"30m","reason":"`+reason+`"}`)
		r.expect(t, 400, codeBadRequest)
	}
	r := e.do("POST", "/admin/holds", opToken, "{\"provider\":\"openai\",\"duration\":\"30m\",\"reason\":\"caf\xc3\"}")
	if !strings.Contains(r.errMessage(), "`reason` is not valid UTF-8") {
		t.Errorf("the refusal does not name the field: %s", r.raw)
	}
	if len(e.svc.engine.Holds()) != 0 {
		t.Fatalf("a refused pin left holds: %+v", e.svc.engine.Holds())
	}
}

func TestPinUpstreamName(t *testing.T) {
	e := startEnvWith(t, envOptions{withKey: true, edit: func(y string) string {
		return strings.Replace(y, "models: [{name: gpt-4o}, {name: gpt-4.1}]",
			"models: [{name: fast, upstream: gpt-4o}, {name: fast-json, upstream: gpt-4o}, {name: gpt-4.1}, {name: latest, upstream: gpt-4.1}]", 1)
	}})
	r := e.do("POST", "/admin/holds", opToken, `{"provider":"openai","model":"gpt-4o","duration":"30m"}`)
	r.expect(t, 400, codeBadRequest)
	if msg := r.errMessage(); !strings.Contains(msg, `pin model "fast" or "fast-json" instead`) {
		t.Errorf("message %q does not name the configured models", msg)
	}
	if len(e.svc.engine.Holds()) != 0 {
		t.Fatalf("a refused pin left holds: %+v", e.svc.engine.Holds())
	}

	r = e.do("POST", "/admin/holds", opToken, `{"provider":"openai","model":"fast","duration":"30m"}`)
	r.expect(t, 201, "")
	if r.body["id"] != "openai._.fast" {
		t.Fatalf("pin = %s", r.raw)
	}
	testkit.CheckFor(t, testTimeout, 5*time.Millisecond, func() error {
		if e.proxy.Engine.Admit("openai", "primary", "fast") != hold.Deny {
			return fmt.Errorf("the proxy still admits fast")
		}
		return nil
	})
	if l := e.do("GET", "/admin/holds?model=fast", readToken, nil); len(l.body["holds"].([]any)) != 1 {
		t.Fatalf("holds of fast: %s", l.raw)
	}
	e.do("DELETE", "/admin/holds/openai._.fast", opToken, nil).expect(t, 204, "")

	r = e.do("POST", "/admin/holds", opToken, `{"provider":"openai","model":"gpt-4.1","duration":"30m"}`)
	r.expect(t, 201, "")
	if r.body["id"] != "openai._.gpt-4=2E1" {
		t.Fatalf("pin = %s", r.raw)
	}
}

// TestOperatorReleaseStartsLadderOver: after an operator's release (a
// provider reset, DELETE /admin/holds/{id}) the target's next hold is on
// rung 0 again (the class base, the breaker cooldown), not one rung up
// as after a probe's release.
func TestOperatorReleaseStartsLadderOver(t *testing.T) {
	e := startEnv(t, true)
	transient := failure.Result{Class: failure.Transient, Code: "503", Reason: "status 503"}
	for _, tt := range []struct {
		name, id, release string
		fail              func()
	}{
		{name: "provider reset", id: "openai._", release: "POST /admin/providers/openai/reset", fail: func() {
			for range 3 { // the breaker's consecutive_failures
				e.fail("openai", "primary", "gpt-4o", transient, 503)
			}
		}},
		{name: "hold release", id: "openai.secondary", release: "DELETE /admin/holds/openai.secondary", fail: func() {
			e.fail("openai", "secondary", "gpt-4o", credentialRejected, 401)
		}},
	} {
		method, path, _ := strings.Cut(tt.release, " ")
		for round := range 2 {
			tt.fail()
			if h := e.waitHold(tt.id, hold.StateHeld); h["rung"] != 0.0 {
				t.Fatalf("%s, round %d: hold on rung %v, want 0 (the ladder starts over after an operator's release): %v", tt.name, round, h["rung"], h)
			}
			e.do(method, path, opToken, nil).expect(t, 204, "")
			e.waitHold(tt.id, hold.StateReleased)
			testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
				if _, held := e.proxy.Engine.HeldUntil("openai", "secondary", "gpt-4o"); held {
					return fmt.Errorf("the stand-in proxy still holds %s", tt.id)
				}
				return nil
			})
		}
	}
}

package failure

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCompileRule(t *testing.T) {
	tests := []struct {
		name, rule, match, class, ttl string
		wantErr                       string
	}{
		{"ok", "vertex-quota", `quota exceeded for .*per_base_model`, "quota_exhausted", "6h", ""},
		{"no ttl", "x", `foo`, "rate_limit", "", ""},
		{"no name", "", `foo`, "rate_limit", "", "needs a name"},
		{"bad regex", "broken", `(`, "rate_limit", "", `"broken": match`},
		{"bad class", "typo", `foo`, "rate-limited", "", `"typo": class`},
		{"bad ttl", "ttl", `foo`, "rate_limit", "ten minutes", `"ttl": ttl`},
		{"negative ttl", "neg", `foo`, "rate_limit", "-1m", `"neg": ttl -1m is negative`},
		{"empty match", "empty", ` `, "rate_limit", "", `"empty": match is empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CompileRule(tt.rule, tt.match, tt.class, tt.ttl)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalidRule)):
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func mustRule(t *testing.T, name, match, class, ttl string) Rule {
	t.Helper()
	r, err := CompileRule(name, match, class, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestClassifierRules(t *testing.T) {
	vertexQuota := Input{Provider: "vertex", Status: 429, Body: []byte(`{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-claude-3-5-sonnet.","status":"RESOURCE_EXHAUSTED"}}`)}
	nested := Input{Provider: "openrouter", Status: 400, Body: []byte(`{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"{\"error\":{\"message\":\"weird upstream thing\",\"code\":\"odd_code\"}}"}}}`)}
	c := Classifier{
		Global: []Rule{
			mustRule(t, "per-base-model", `per_base_model`, "quota_exhausted", "6h"),
			mustRule(t, "odd", `^odd_code$`, "credential_rejected", ""),
		},
		PerProvider: map[string][]Rule{
			"vertex-eu":   {mustRule(t, "eu-only", `RESOURCE_EXHAUSTED`, "transient", "30s")},
			"vertex-none": {},
		},
		Now: func() time.Time { return testNow },
	}
	tests := []struct {
		name, provider string
		in             Input
		class          Class
		scope          Scope
		rule           string
		ttl            time.Duration
	}{
		{"global rule on message", "vertex-us", vertexQuota, QuotaExhausted, ScopeKey, "per-base-model", 6 * time.Hour},
		{"provider set replaces global", "vertex-eu", vertexQuota, Transient, ScopeNone, "eu-only", 30 * time.Second},
		{"empty provider set disables rules", "vertex-none", vertexQuota, RateLimit, ScopeKeyModel, "", 0},
		{"rule on nested upstream code", "openrouter", nested, CredentialRejected, ScopeKey, "odd", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := c.Classify(tt.in, tt.provider)
			if got.Class != tt.class || got.Scope != tt.scope || got.Rule != tt.rule || got.HoldTTL != tt.ttl {
				t.Errorf("got %s/%s rule %q ttl %v, want %s/%s rule %q ttl %v", got.Class, got.Scope, got.Rule, got.HoldTTL, tt.class, tt.scope, tt.rule, tt.ttl)
			}
		})
	}
	var zero Classifier
	if got, want := zero.Classify(vertexQuota, "x"), ClassifyAt(vertexQuota, time.Now()); got.Class != want.Class || got.Scope != want.Scope {
		t.Errorf("zero Classifier = %+v, want %+v", got, want)
	}
}

func TestRulesFromEnv(t *testing.T) {
	rules, err := RulesFromEnv([]string{
		"PATH=/bin",
		"SWITCHYARD_TRIP_VERTEX_QUOTA_MATCH=per_base_model",
		"SWITCHYARD_TRIP_VERTEX_QUOTA_CLASS=quota_exhausted",
		"SWITCHYARD_TRIP_VERTEX_QUOTA_TTL=6h",
		"SWITCHYARD_TRIP_A_MATCH=foo",
		"SWITCHYARD_TRIP_A_CLASS=rate_limit",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 || rules[0].Name != "a" || rules[1].Name != "vertex_quota" || rules[1].TTL != 6*time.Hour || rules[1].Class != QuotaExhausted {
		t.Fatalf("rules = %+v", rules)
	}
	_, err = RulesFromEnv([]string{"SWITCHYARD_TRIP_BAD_MATCH=foo"})
	if err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Fatalf("missing class: err = %v", err)
	}
	_, err = RulesFromEnv([]string{"SWITCHYARD_TRIP_BAD_TIL=1h"})
	if err == nil || !strings.Contains(err.Error(), "SWITCHYARD_TRIP_BAD_TIL") {
		t.Fatalf("unknown field: err = %v", err)
	}
}

package routingdoc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/config"
)

// editDoc is a hand-written document: comments and order must survive
// an edit.
const editDoc = `# Routing for the EU fleet.
providers:
  - name: openai # main account
    type: openai
    keys:
      - id: k1
        secret: env:OPENAI_K1
        weight: 1
      - id: k2
        secret: env:OPENAI_K2
    models: [{name: gpt-4o-mini}]
  - name: anthropic
    type: anthropic
    keys:
      - id: a1
        secret: env:ANTHROPIC_KEY
    models: [{name: claude-haiku-4-5}]
    trip_on:
      overloaded: {match: overloaded, class: rate_limit}
chains:
  default:
    steps:
      - target: openai/gpt-4o-mini
      - target: anthropic/claude-haiku-4-5 # fallback
        active: false
aliases:
  fast: chain:default
`

func TestEdits(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(doc []byte) ([]byte, error)
		pairs   []string // old, new text pairs turning editDoc into the wanted document
		same    bool     // the document comes back unchanged (the same bytes)
		wantErr error
		errText string
	}{
		{name: "step off", edit: func(d []byte) ([]byte, error) { return SetStepActive(d, "default", 0, false) },
			pairs: []string{"      - target: openai/gpt-4o-mini\n", "      - target: openai/gpt-4o-mini\n        active: false\n"}},
		{name: "step on", edit: func(d []byte) ([]byte, error) { return SetStepActive(d, "default", 1, true) },
			pairs: []string{"        active: false\n", "        active: true\n"}},
		{name: "step already active", edit: func(d []byte) ([]byte, error) { return SetStepActive(d, "default", 0, true) }, same: true},
		{name: "step already off", edit: func(d []byte) ([]byte, error) { return SetStepActive(d, "default", 1, false) }, same: true},
		{name: "no such chain", edit: func(d []byte) ([]byte, error) { return SetStepActive(d, "cheap", 0, false) },
			wantErr: ErrNotFound, errText: `chain "cheap" (chains: default)`},
		{name: "no such step", edit: func(d []byte) ([]byte, error) { return SetStepActive(d, "default", 2, false) },
			wantErr: ErrNotFound, errText: `chain "default" has 2 steps (0 to 1); no step 2`},
		{name: "key weight", edit: func(d []byte) ([]byte, error) { return SetKeyField(d, "openai", "k1", "weight", 3) },
			pairs: []string{"        weight: 1\n", "        weight: 3\n"}},
		{name: "key priority added, JSON number", edit: func(d []byte) ([]byte, error) {
			return SetKeyField(d, "openai", "k2", "priority", float64(2))
		}, pairs: []string{"        secret: env:OPENAI_K2\n", "        secret: env:OPENAI_K2\n        priority: 2\n"}},
		{name: "key weight unchanged", edit: func(d []byte) ([]byte, error) { return SetKeyField(d, "openai", "k1", "weight", "1") }, same: true},
		{name: "key switched off", edit: func(d []byte) ([]byte, error) { return SetKeyField(d, "openai", "k1", "enabled", false) },
			pairs: []string{"        weight: 1\n", "        weight: 1\n        enabled: false\n"}},
		{name: "key already on", edit: func(d []byte) ([]byte, error) { return SetKeyField(d, "openai", "k2", "enabled", true) }, same: true},
		{name: "key enabled not a boolean", edit: func(d []byte) ([]byte, error) { return SetKeyField(d, "openai", "k1", "enabled", "no") },
			wantErr: ErrInvalid, errText: "providers.openai.keys.k1.enabled: want true or false"},
		{name: "key field not settable", edit: func(d []byte) ([]byte, error) { return SetKeyField(d, "openai", "k1", "secret", "env:X") },
			wantErr: ErrInvalid, errText: `key field "secret" cannot be edited (settable: priority, weight, enabled)`},
		{name: "key weight not a number", edit: func(d []byte) ([]byte, error) { return SetKeyField(d, "openai", "k1", "weight", 1.5) },
			wantErr: ErrInvalid, errText: "providers.openai.keys.k1.weight: want an integer"},
		{name: "no such provider", edit: func(d []byte) ([]byte, error) { return SetKeyField(d, "groq", "k1", "weight", 1) },
			wantErr: ErrNotFound, errText: `provider "groq" (providers: openai, anthropic)`},
		{name: "no such key", edit: func(d []byte) ([]byte, error) { return SetKeyField(d, "openai", "k9", "weight", 1) },
			wantErr: ErrNotFound, errText: `provider "openai" has no key "k9" (keys: k1, k2)`},
		{name: "add key", edit: func(d []byte) ([]byte, error) {
			return AddKey(d, "openai", map[string]any{"weight": 2, "secret": "env:OPENAI_K3", "id": "k3"})
		}, pairs: []string{"        secret: env:OPENAI_K2\n", "        secret: env:OPENAI_K2\n      - id: k3\n        secret: env:OPENAI_K3\n        weight: 2\n"}},
		{name: "add key twice", edit: func(d []byte) ([]byte, error) {
			return AddKey(d, "openai", map[string]any{"id": "k2", "secret": "env:OPENAI_K2"})
		}, wantErr: ErrInvalid, errText: `provider "openai" already has a key "k2"`},
		{name: "add key with an inline secret", edit: func(d []byte) ([]byte, error) {
			return AddKey(d, "openai", map[string]any{"id": "k3", "secret": "sk-live-0123456789abcdef"})
		}, wantErr: ErrInvalid, errText: "providers.openai.keys.k3.secret: give a reference"},
		{name: "add key without an id", edit: func(d []byte) ([]byte, error) {
			return AddKey(d, "openai", map[string]any{"secret": "env:X"})
		}, wantErr: ErrInvalid, errText: "needs an id"},
		{name: "add key with an unknown field", edit: func(d []byte) ([]byte, error) {
			return AddKey(d, "openai", map[string]any{"id": "k3", "secret": "env:X", "colour": "red"})
		}, wantErr: ErrInvalid, errText: `unknown field "colour"`},
		{name: "add key switched off", edit: func(d []byte) ([]byte, error) {
			return AddKey(d, "openai", map[string]any{"id": "k3", "secret": "env:OPENAI_K3", "enabled": false})
		}, pairs: []string{"        secret: env:OPENAI_K2\n", "        secret: env:OPENAI_K2\n      - id: k3\n        secret: env:OPENAI_K3\n        enabled: false\n"}},
		{name: "add key to a missing provider", edit: func(d []byte) ([]byte, error) {
			return AddKey(d, "groq", map[string]any{"id": "g1", "secret": "env:GROQ"})
		}, wantErr: ErrNotFound, errText: `provider "groq"`},
		{name: "trip rules set", edit: func(d []byte) ([]byte, error) {
			return SetTripRules(d, "openai", map[string]any{"quota": map[string]any{"class": "quota_exhausted", "match": "insufficient_quota", "ttl": time.Hour}})
		}, pairs: []string{"    models: [{name: gpt-4o-mini}]\n", "    models: [{name: gpt-4o-mini}]\n    trip_on:\n      quota:\n        match: insufficient_quota\n        class: quota_exhausted\n        ttl: 1h0m0s\n"}},
		{name: "trip rules replaced", edit: func(d []byte) ([]byte, error) {
			return SetTripRules(d, "anthropic", map[string]any{"busy": map[string]any{"match": "busy", "class": "rate_limit"}})
		}, pairs: []string{"      overloaded: {match: overloaded, class: rate_limit}\n", "      busy:\n        match: busy\n        class: rate_limit\n"}},
		{name: "trip rules emptied", edit: func(d []byte) ([]byte, error) { return SetTripRules(d, "anthropic", map[string]any{}) },
			pairs: []string{"    trip_on:\n      overloaded: {match: overloaded, class: rate_limit}\n", "    trip_on: {}\n"}},
		{name: "trip rules removed", edit: func(d []byte) ([]byte, error) { return SetTripRules(d, "anthropic", nil) },
			pairs: []string{"    trip_on:\n      overloaded: {match: overloaded, class: rate_limit}\n", ""}},
		{name: "trip rules already absent", edit: func(d []byte) ([]byte, error) { return SetTripRules(d, "openai", nil) }, same: true},
		{name: "trip rule unknown field", edit: func(d []byte) ([]byte, error) {
			return SetTripRules(d, "openai", map[string]any{"x": map[string]any{"match": "a", "colour": "red"}})
		}, wantErr: ErrInvalid, errText: `unknown field "colour"`},
		{name: "trip rule not a mapping", edit: func(d []byte) ([]byte, error) {
			return SetTripRules(d, "openai", map[string]any{"x": "quota"})
		}, wantErr: ErrInvalid, errText: "providers.openai.trip_on.x: want {match, class, ttl}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.edit([]byte(editDoc))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("err = %v, want %v with %q", err, tt.wantErr, tt.errText)
				}
				if strings.Contains(err.Error(), "sk-live") {
					t.Fatalf("the error quotes a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := editDoc
			for i := 0; i+1 < len(tt.pairs); i += 2 {
				if !strings.Contains(want, tt.pairs[i]) {
					t.Fatalf("test document lacks %q", tt.pairs[i])
				}
				want = strings.Replace(want, tt.pairs[i], tt.pairs[i+1], 1)
			}
			if string(got) != want {
				t.Fatalf("got:\n%s\nwant:\n%s", got, want)
			}
			if tt.same != (len(tt.pairs) == 0) {
				t.Fatal("a case either changes the document or says it does not")
			}
		})
	}
}

// TestEditFormats: the indentation of the document is kept; a JSON
// document comes back as block YAML.
func TestEditFormats(t *testing.T) {
	four := "chains:\n    default:\n        steps:\n            - target: a/b\n            - target: c/d\n"
	got, err := SetStepActive([]byte(four), "default", 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := four + "              active: false\n"; string(got) != want {
		t.Fatalf("four spaces:\n%s\nwant:\n%s", got, want)
	}
	js := `{"chains": {"default": {"steps": [{"target": "a/b"}, {"target": "c/d"}]}}}`
	got, err = SetStepActive([]byte(js), "default", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := "chains:\n  default:\n    steps:\n      - target: a/b\n        active: false\n      - target: c/d\n"; string(got) != want {
		t.Fatalf("from JSON:\n%s\nwant:\n%s", got, want)
	}
	if _, err := SetStepActive([]byte("- a\n"), "default", 0, false); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a list: %v", err)
	}
}

// TestEditThenDiff: what an edit changes is what Diff reports, and only
// that.
func TestEditThenDiff(t *testing.T) {
	doc, err := SetKeyField([]byte(editDoc), "openai", "k2", "weight", 5)
	if err != nil {
		t.Fatal(err)
	}
	doc, err = SetStepActive(doc, "default", 1, true)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := Diff([]byte(editDoc), doc)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, ch, []Change{
		{Op: OpChanged, Path: "chains.default.steps[1].active", Before: false, After: true},
		{Op: OpAdded, Path: "providers.openai.keys.k2.weight", After: 5},
	})
}

// TestStepActiveSpellings: a step's active flag reads as the configuration
// loader reads it (weakly typed), whatever its spelling, so switching it
// on or off changes what the loader sees.
func TestStepActiveSpellings(t *testing.T) {
	env := []string{"OPENAI_API_KEY=sk-x"}
	activeOf := func(t *testing.T, d []byte) bool {
		t.Helper()
		cfg, err := config.LoadDocument("", env, d, "doc")
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Chains["default"].Steps[0].IsActive()
	}
	for _, spelling := range []string{`false`, `"false"`, `0`, `"0"`, `"F"`, `FALSE`, `""`, `true`, `"1"`, `1`} {
		t.Run(spelling, func(t *testing.T) {
			d := []byte(strings.Replace(string(doc(1)), "      - target: openai/gpt-4o-mini\n", "      - target: openai/gpt-4o-mini\n        active: "+spelling+"\n", 1))
			was := activeOf(t, d)
			got, err := SetStepActive(d, "default", 0, !was)
			if err != nil {
				t.Fatal(err)
			}
			if activeOf(t, got) != !was {
				t.Fatalf("active: %s (loaded as %v), switched to %v: still %v\n%s", spelling, was, !was, was, got)
			}
			if same, _ := SetStepActive(d, "default", 0, was); string(same) != string(d) {
				t.Fatalf("active: %s (loaded as %v), switched to %v: changed\n%s", spelling, was, was, same)
			}
		})
	}
}

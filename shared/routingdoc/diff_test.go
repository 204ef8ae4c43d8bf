package routingdoc

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// baseDoc is a routing document with one of everything Diff knows.
const baseDoc = `
providers:
  - name: openai-eu
    type: openai
    keys:
      - id: k1
        secret: env:OPENAI_K1
        priority: 0
        weight: 1
      - id: k2
        secret: env:OPENAI_K2
        weight: 1
    models:
      - name: gpt-4.1
      - name: gpt-4o-mini
    resilience:
      breaker:
        cooldown: 30s
    trip_on:
      quota:
        match: insufficient_quota
        class: quota_exhausted
    health_check:
      expected_statuses: [200, 204]
  - name: anthropic
    type: anthropic
    keys: [{id: a1, secret: env:ANTHROPIC_KEY}]
    models: [{name: claude-haiku-4-5}]
aliases:
  fast: chain:default
chains:
  default:
    steps:
      - target: openai-eu/gpt-4o-mini
      - target: anthropic/claude-haiku-4-5
clients:
  - id: team-a
    secret: env:TEAM_A
    models: [fast, "openai-eu/*"]
    plan: basic
plans:
  basic:
    requests_per_minute: 60
    budget: {day: 5}
prices:
  - provider: openai-eu
    model: gpt-4.1
    input: 2
    output: 8
  - provider_type: anthropic
    model: claude-haiku-4-5
    input: 1
trip_on:
  overloaded:
    match: overloaded
    class: rate_limit
resilience:
  jitter: 0.2
  breaker:
    consecutive_failures: 5
`

// replace returns baseDoc with old replaced by new, failing when old is
// not there (a typo in a test would otherwise test nothing).
func replace(t *testing.T, pairs ...string) string {
	t.Helper()
	doc := baseDoc
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(doc, pairs[i]) {
			t.Fatalf("base document lacks %q", pairs[i])
		}
		doc = strings.Replace(doc, pairs[i], pairs[i+1], 1)
	}
	return doc
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name string
		new  func(t *testing.T) string
		want []Change
	}{
		{name: "identical", new: func(t *testing.T) string { return baseDoc }},
		{name: "providers reordered", new: func(t *testing.T) string {
			anthropic := "  - name: anthropic\n    type: anthropic\n    keys: [{id: a1, secret: env:ANTHROPIC_KEY}]\n    models: [{name: claude-haiku-4-5}]\n"
			doc := replace(t, anthropic, "")
			return strings.Replace(doc, "providers:\n", "providers:\n"+anthropic, 1)
		}, want: []Change{{Op: OpChanged, Path: "providers", Before: []any{"openai-eu", "anthropic"}, After: []any{"anthropic", "openai-eu"}}}},
		{name: "keys reordered", new: func(t *testing.T) string {
			return replace(t,
				"      - id: k1\n        secret: env:OPENAI_K1\n        priority: 0\n        weight: 1\n      - id: k2\n        secret: env:OPENAI_K2\n        weight: 1\n",
				"      - id: k2\n        secret: env:OPENAI_K2\n        weight: 1\n      - id: k1\n        secret: env:OPENAI_K1\n        priority: 0\n        weight: 1\n")
		}},
		{name: "client models reordered, statuses reordered, same number written 1.0", new: func(t *testing.T) string {
			return replace(t, `models: [fast, "openai-eu/*"]`, `models: ["openai-eu/*", fast]`,
				"[200, 204]", "[204, 200]", "requests_per_minute: 60", "requests_per_minute: 60.0")
		}},
		{name: "key weight", new: func(t *testing.T) string {
			return replace(t, "secret: env:OPENAI_K2\n        weight: 1", "secret: env:OPENAI_K2\n        weight: 3")
		}, want: []Change{{Op: OpChanged, Path: "providers.openai-eu.keys.k2.weight", Before: 1, After: 3}}},
		{name: "key priority added", new: func(t *testing.T) string {
			return replace(t, "secret: env:OPENAI_K2\n", "secret: env:OPENAI_K2\n        priority: 2\n")
		}, want: []Change{{Op: OpAdded, Path: "providers.openai-eu.keys.k2.priority", After: 2}}},
		{name: "key added", new: func(t *testing.T) string {
			return replace(t, "        weight: 1\n    models:", "        weight: 1\n      - {id: k3, secret: env:OPENAI_K3, weight: 2}\n    models:")
		}, want: []Change{{Op: OpAdded, Path: "providers.openai-eu.keys.k3",
			After: map[string]any{"id": "k3", "secret": "env:OPENAI_K3", "weight": 2}}}},
		{name: "key secret reference", new: func(t *testing.T) string {
			return replace(t, "env:OPENAI_K1", "file:/run/secrets/k1")
		}, want: []Change{{Op: OpChanged, Path: "providers.openai-eu.keys.k1.secret", Before: "env:OPENAI_K1", After: "file:/run/secrets/k1"}}},
		{name: "inline secret masked", new: func(t *testing.T) string {
			return replace(t, "env:OPENAI_K1", "sk-live-0123456789abcdef")
		}, want: []Change{{Op: OpChanged, Path: "providers.openai-eu.keys.k1.secret", Before: "env:OPENAI_K1", After: "[redacted]"}}},
		{name: "provider removed whole", new: func(t *testing.T) string {
			return replace(t, "  - name: anthropic\n    type: anthropic\n    keys: [{id: a1, secret: env:ANTHROPIC_KEY}]\n    models: [{name: claude-haiku-4-5}]\n", "")
		}, want: []Change{{Op: OpRemoved, Path: "providers.anthropic", Before: map[string]any{
			"name": "anthropic", "type": "anthropic",
			"keys":   []any{map[string]any{"id": "a1", "secret": "env:ANTHROPIC_KEY"}},
			"models": []any{map[string]any{"name": "claude-haiku-4-5"}},
		}}}},
		{name: "model with a dot in its name", new: func(t *testing.T) string {
			return replace(t, "      - name: gpt-4.1\n", "      - name: gpt-4.1\n        upstream: gpt-4.1-2025-04-14\n")
		}, want: []Change{{Op: OpAdded, Path: `providers.openai-eu.models["gpt-4.1"].upstream`, After: "gpt-4.1-2025-04-14"}}},
		{name: "provider resilience, trip rule, health check", new: func(t *testing.T) string {
			return replace(t, "cooldown: 30s", "cooldown: 1m", "match: insufficient_quota", "match: insufficient_quota|billing",
				"[200, 204]", "[200]")
		}, want: []Change{
			{Op: OpChanged, Path: "providers.openai-eu.health_check.expected_statuses", Before: []any{200, 204}, After: []any{200}},
			{Op: OpChanged, Path: "providers.openai-eu.resilience.breaker.cooldown", Before: "30s", After: "1m"},
			{Op: OpChanged, Path: "providers.openai-eu.trip_on.quota.match", Before: "insufficient_quota", After: "insufficient_quota|billing"},
		}},
		{name: "provider trip_on set empty", new: func(t *testing.T) string {
			return replace(t, "    models: [{name: claude-haiku-4-5}]\n", "    models: [{name: claude-haiku-4-5}]\n    trip_on: {}\n")
		}, want: []Change{{Op: OpAdded, Path: "providers.anthropic.trip_on", After: map[string]any{}}}},
		{name: "provider trip rule added", new: func(t *testing.T) string {
			return replace(t, "        class: quota_exhausted\n", "        class: quota_exhausted\n      region:\n        match: unsupported_country\n        class: region_blocked\n")
		}, want: []Change{{Op: OpAdded, Path: "providers.openai-eu.trip_on.region",
			After: map[string]any{"match": "unsupported_country", "class": "region_blocked"}}}},
		{name: "chain steps swapped", new: func(t *testing.T) string {
			return replace(t, "      - target: openai-eu/gpt-4o-mini\n      - target: anthropic/claude-haiku-4-5\n",
				"      - target: anthropic/claude-haiku-4-5\n      - target: openai-eu/gpt-4o-mini\n")
		}, want: []Change{
			{Op: OpChanged, Path: "chains.default.steps[0].target", Before: "openai-eu/gpt-4o-mini", After: "anthropic/claude-haiku-4-5"},
			{Op: OpChanged, Path: "chains.default.steps[1].target", Before: "anthropic/claude-haiku-4-5", After: "openai-eu/gpt-4o-mini"},
		}},
		{name: "chain step switched off", new: func(t *testing.T) string {
			return replace(t, "      - target: anthropic/claude-haiku-4-5\n", "      - target: anthropic/claude-haiku-4-5\n        active: false\n")
		}, want: []Change{{Op: OpChanged, Path: "chains.default.steps[1].active", Before: true, After: false}}},
		{name: "chain step active: true written out is no change", new: func(t *testing.T) string {
			return replace(t, "      - target: anthropic/claude-haiku-4-5\n", "      - target: anthropic/claude-haiku-4-5\n        active: true\n")
		}},
		{name: "chain step appended", new: func(t *testing.T) string {
			return replace(t, "      - target: anthropic/claude-haiku-4-5\n", "      - target: anthropic/claude-haiku-4-5\n      - target: openai-eu/gpt-4.1\n")
		}, want: []Change{{Op: OpAdded, Path: "chains.default.steps[2]", After: map[string]any{"target": "openai-eu/gpt-4.1", "active": true}}}},
		{name: "alias changed and added", new: func(t *testing.T) string {
			return replace(t, "  fast: chain:default\n", "  fast: openai-eu/gpt-4o-mini\n  smart: openai-eu/gpt-4.1\n")
		}, want: []Change{
			{Op: OpChanged, Path: "aliases.fast", Before: "chain:default", After: "openai-eu/gpt-4o-mini"},
			{Op: OpAdded, Path: "aliases.smart", After: "openai-eu/gpt-4.1"},
		}},
		{name: "client", new: func(t *testing.T) string {
			return replace(t, `models: [fast, "openai-eu/*"]`, `models: [fast]`, "plan: basic", "plan: gold", "env:TEAM_A", "env:TEAM_A_2")
		}, want: []Change{
			{Op: OpChanged, Path: "clients.team-a.models", Before: []any{"fast", "openai-eu/*"}, After: []any{"fast"}},
			{Op: OpChanged, Path: "clients.team-a.plan", Before: "basic", After: "gold"},
			{Op: OpChanged, Path: "clients.team-a.secret", Before: "env:TEAM_A", After: "env:TEAM_A_2"},
		}},
		{name: "plan limits", new: func(t *testing.T) string {
			return replace(t, "budget: {day: 5}", "budget: {day: 10, month: 100}", "requests_per_minute: 60", "tokens_per_minute: 1000")
		}, want: []Change{
			{Op: OpChanged, Path: "plans.basic.budget.day", Before: 5, After: 10},
			{Op: OpAdded, Path: "plans.basic.budget.month", After: 100},
			{Op: OpRemoved, Path: "plans.basic.requests_per_minute", Before: 60},
			{Op: OpAdded, Path: "plans.basic.tokens_per_minute", After: 1000},
		}},
		{name: "prices by provider, by type", new: func(t *testing.T) string {
			return replace(t, "    input: 2\n", "    input: 2.5\n", "  - provider_type: anthropic\n", "  - provider_type: anthropic\n    output: 5\n")
		}, want: []Change{
			{Op: OpChanged, Path: `prices["openai-eu/gpt-4.1"].input`, Before: 2, After: 2.5},
			{Op: OpAdded, Path: `prices["type:anthropic/claude-haiku-4-5"].output`, After: 5},
		}},
		{name: "price moved from a provider to any provider", new: func(t *testing.T) string {
			return replace(t, "  - provider: openai-eu\n    model: gpt-4.1\n", "  - model: gpt-4.1\n")
		}, want: []Change{
			{Op: OpAdded, Path: `prices["*/gpt-4.1"]`, After: map[string]any{"model": "gpt-4.1", "input": 2, "output": 8}},
			{Op: OpRemoved, Path: `prices["openai-eu/gpt-4.1"]`, Before: map[string]any{"provider": "openai-eu", "model": "gpt-4.1", "input": 2, "output": 8}},
		}},
		{name: "global trip rule and resilience", new: func(t *testing.T) string {
			return replace(t, "class: rate_limit", "class: rate_limit\n    ttl: 2m", "jitter: 0.2", "jitter: 0.3\n  all_held_policy: try_soft",
				"  breaker:\n    consecutive_failures: 5\n", "")
		}, want: []Change{
			{Op: OpAdded, Path: "resilience.all_held_policy", After: "try_soft"},
			{Op: OpRemoved, Path: "resilience.breaker.consecutive_failures", Before: 5},
			{Op: OpChanged, Path: "resilience.jitter", Before: 0.2, After: 0.3},
			{Op: OpAdded, Path: "trip_on.overloaded.ttl", After: "2m"},
		}},
		{name: "global trip rule removed", new: func(t *testing.T) string {
			return replace(t, "trip_on:\n  overloaded:\n    match: overloaded\n    class: rate_limit\n", "")
		}, want: []Change{{Op: OpRemoved, Path: "trip_on.overloaded", Before: map[string]any{"match": "overloaded", "class": "rate_limit"}}}},
		{name: "null counts as absent", new: func(t *testing.T) string {
			return replace(t, "plan: basic", "plan: basic\n    extra: null")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Diff([]byte(baseDoc), []byte(tt.new(t)))
			if err != nil {
				t.Fatal(err)
			}
			checkChanges(t, got, tt.want)
			// The other way round: the same paths, ops swapped.
			back, err := Diff([]byte(tt.new(t)), []byte(baseDoc))
			if err != nil {
				t.Fatal(err)
			}
			checkChanges(t, back, invert(tt.want))
		})
	}
}

func invert(cs []Change) []Change {
	var out []Change
	for _, c := range cs {
		c.Before, c.After = c.After, c.Before
		switch c.Op {
		case OpAdded:
			c.Op = OpRemoved
		case OpRemoved:
			c.Op = OpAdded
		}
		out = append(out, c)
	}
	// Sorted by path, as Diff sorts.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Path < out[j-1].Path; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func checkChanges(t *testing.T, got Changes, want []Change) {
	t.Helper()
	if len(want) == 0 {
		want = []Change{}
	}
	if !reflect.DeepEqual(got.Changes, want) {
		g, _ := json.MarshalIndent(got.Changes, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("changes:\n%s\nwant:\n%s", g, w)
	}
	var a, c, r int
	for _, ch := range want {
		switch ch.Op {
		case OpAdded:
			a++
		case OpChanged:
			c++
		case OpRemoved:
			r++
		}
	}
	if got.Added != a || got.Changed != c || got.Removed != r {
		t.Fatalf("counts %d/%d/%d, want %d/%d/%d", got.Added, got.Changed, got.Removed, a, c, r)
	}
	if _, err := json.Marshal(got); err != nil {
		t.Fatalf("not JSON-friendly: %v", err)
	}
}

// TestDiffJSON: a JSON document and the same document in YAML do not
// differ, and a change shows the same either way.
func TestDiffJSON(t *testing.T) {
	var v any
	if err := yaml.Unmarshal([]byte(baseDoc), &v); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Diff([]byte(baseDoc), js)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, got, nil)
	changed := strings.Replace(string(js), `"jitter":0.2`, `"jitter":0.25`, 1)
	got, err = Diff(js, []byte(changed))
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, got, []Change{{Op: OpChanged, Path: "resilience.jitter", Before: 0.2, After: 0.25}})
}

// TestDiffFromNothing: against an empty document every top-level entity
// and setting is added, once (not again for what it contains).
func TestDiffFromNothing(t *testing.T) {
	got, err := Diff(nil, []byte("providers:\n  - {name: p, type: openai, keys: [{id: k, secret: env:K}]}\naliases: {a: p/m}\nresilience: {jitter: 0.1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range got.Changes {
		if c.Op != OpAdded {
			t.Errorf("%+v", c)
		}
		paths = append(paths, c.Path)
	}
	if want := "aliases.a providers.p resilience.jitter"; strings.Join(paths, " ") != want {
		t.Fatalf("paths %q, want %q", paths, want)
	}
	if got.Added != 3 {
		t.Fatalf("added %d", got.Added)
	}
}

// TestDiffOrder: paths sort by their parts, positions as numbers.
func TestDiffOrder(t *testing.T) {
	var old, new strings.Builder
	old.WriteString("chains:\n  c:\n    steps:\n")
	new.WriteString("chains:\n  c:\n    steps:\n")
	for i := range 12 {
		fmt.Fprintf(&old, "      - target: p/m%d\n", i)
		fmt.Fprintf(&new, "      - target: p/n%d\n", i)
	}
	got, err := Diff([]byte(old.String()), []byte(new.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Changes) != 12 {
		t.Fatalf("%d changes", len(got.Changes))
	}
	for i, c := range got.Changes {
		if want := fmt.Sprintf("chains.c.steps[%d].target", i); c.Path != want {
			t.Fatalf("change %d: %s, want %s", i, c.Path, want)
		}
	}
}

func TestDiffErrors(t *testing.T) {
	tests := []struct{ name, old, new, want string }{
		{"not yaml", baseDoc, "providers: [", "new document: not a YAML or JSON document"},
		{"not a mapping", "- a\n- b\n", baseDoc, "old document is not a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Diff([]byte(tt.old), []byte(tt.new))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalid and %q", err, tt.want)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	ch, err := Diff([]byte(baseDoc), []byte(replace(t, "secret: env:OPENAI_K2\n        weight: 1", "secret: env:OPENAI_K2\n        weight: 3")))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ch.Summary(), "providers.openai-eu.keys.k2.weight: 1 -> 3"; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
	many := Changes{Changes: []Change{
		{Op: OpAdded, Path: "a"}, {Op: OpRemoved, Path: "b"}, {Op: OpChanged, Path: "c", Before: "x", After: "y"}, {Op: OpAdded, Path: "d"},
	}}
	if got, want := many.Summary(), `added a; removed b; c: "x" -> "y" (and 1 more)`; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
	if (Changes{}).Summary() != "no change" {
		t.Fatal("empty summary")
	}
}

package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
)

type fakeSource struct {
	holds    []hold.Record
	breakers map[string]string
}

func (f fakeSource) HoldCounts() map[hold.Group]int {
	out := map[hold.Group]int{}
	for _, r := range f.holds {
		out[hold.Group{Class: r.Class, Kind: r.Scope.Kind, State: r.State}]++
	}
	return out
}
func (f fakeSource) BreakerStates() map[string]string { return f.breakers }

func rec(kind hold.ScopeKind, provider, key, model string, class failure.Class, state hold.State) hold.Record {
	return hold.Record{
		Scope: hold.Scope{Kind: kind, Provider: provider, Key: key, Model: model},
		Class: class, State: state,
		Reason: "sk-live-secret-in-a-reason", Fingerprint: "9df37f5e", Code: "invalid_api_key",
	}
}

func TestHoldCollector(t *testing.T) {
	src := fakeSource{
		holds: []hold.Record{
			rec(hold.ScopeKey, "openai", "primary", "", failure.CredentialRejected, hold.StateHeld),
			rec(hold.ScopeKey, "openai", "secondary", "", failure.CredentialRejected, hold.StateHeld),
			rec(hold.ScopeProvider, "openai", "", "", failure.Transient, hold.StateProbing),
			rec(hold.ScopeKeyModel, "anthropic", "a", "claude", failure.ModelNotAccessible, hold.StateReleased),
		},
		breakers: map[string]string{
			"openai":                       "half-open",
			"anthropic":                    "closed",
			"vllm/meta-llama/Llama-3-8B":   "open",
			"broken/\xff":                  "open", // not UTF-8: dropped, the scrape goes on
			"groq/llama-3.1-8b-instant":    "closed",
			"mistral/mistral-large-latest": "half-open",
		},
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewHoldCollector(src))
	want := `
# HELP switchyard_circuit_breaker_state Circuit breaker state per provider (model is set for per-model breakers, empty for a provider-wide one): 0 closed, 1 half-open, 2 open.
# TYPE switchyard_circuit_breaker_state gauge
switchyard_circuit_breaker_state{model="",provider="anthropic"} 0
switchyard_circuit_breaker_state{model="",provider="openai"} 1
switchyard_circuit_breaker_state{model="llama-3.1-8b-instant",provider="groq"} 0
switchyard_circuit_breaker_state{model="meta-llama/Llama-3-8B",provider="vllm"} 2
switchyard_circuit_breaker_state{model="mistral-large-latest",provider="mistral"} 1
# HELP switchyard_holds Hold records in this process's table, by failure class, scope kind and state (held, probing, released: ramping back).
# TYPE switchyard_holds gauge
switchyard_holds{class="credential_rejected",scope="key",state="held"} 2
switchyard_holds{class="model_not_accessible",scope="key+model",state="released"} 1
switchyard_holds{class="transient",scope="provider",state="probing"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), HoldsName, BreakerName); err != nil {
		t.Fatal(err)
	}
}

func TestHoldCollectorEmpty(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewHoldCollector(fakeSource{}))
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("%d series, err %v", n, err)
	}
}

func TestSplitBreakerName(t *testing.T) {
	for _, tt := range []struct{ name, provider, model string }{
		{"openai", "openai", ""},
		{"openai/gpt-4o", "openai", "gpt-4o"},
		{"vllm/meta-llama/Llama-3-8B", "vllm", "meta-llama/Llama-3-8B"},
	} {
		if p, m := SplitBreakerName(tt.name); p != tt.provider || m != tt.model {
			t.Errorf("SplitBreakerName(%q) = %q, %q; want %q, %q", tt.name, p, m, tt.provider, tt.model)
		}
	}
}

func TestBreakerValue(t *testing.T) {
	for state, want := range map[string]float64{"closed": 0, "half-open": 1, "open": 2, "": 0} {
		if got := BreakerValue(state); got != want {
			t.Errorf("BreakerValue(%q) = %v, want %v", state, got, want)
		}
	}
}

package hold

import "testing"

func TestScopeIDRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		s    Scope
		id   string
	}{
		{"key", Scope{Kind: ScopeKey, Provider: "openai", Key: "k1"}, "openai.k1"},
		{"key+model", Scope{Kind: ScopeKeyModel, Provider: "openai", Key: "k1", Model: "gpt-4.1"}, "openai.k1.gpt-4=2E1"},
		{"provider", Scope{Kind: ScopeProvider, Provider: "anthropic"}, "anthropic._"},
		{"provider+model", Scope{Kind: ScopeProviderModel, Provider: "or", Model: "openrouter/auto:free"}, "or._.openrouter=2Fauto=3Afree"},
		{"odd model", Scope{Kind: ScopeKeyModel, Provider: "p", Key: "k", Model: "a=b_c d*>"}, "p.k.a=3Db=5Fc=20d=2A=3E"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.ID(); got != tt.id {
				t.Fatalf("ID = %q, want %q", got, tt.id)
			}
			back, err := ParseID(tt.id)
			if err != nil || back != tt.s {
				t.Fatalf("ParseID = %+v, %v; want %+v", back, err, tt.s)
			}
		})
	}
	for _, bad := range []string{"", "p", "p..m", "a.b.c.d", "p.k.bad=4", "p.k.=ZZ"} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) accepted", bad)
		}
	}
}

func FuzzToken(f *testing.F) {
	f.Add("gpt-4.1")
	f.Fuzz(func(t *testing.T, s string) {
		enc := EncodeToken(s)
		for i := 0; i < len(enc); i++ {
			c := enc[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '=') {
				t.Fatalf("encoded %q has %q", enc, c)
			}
		}
		dec, err := DecodeToken(enc)
		if err != nil || dec != s {
			t.Fatalf("round trip %q -> %q -> %q, %v", s, enc, dec, err)
		}
	})
}

// TestTrippedCheckable: the prober can send what tripped a breaker
// cheaply only for the operations it has a one-token request of, with a
// model, or its own check.
func TestTrippedCheckable(t *testing.T) {
	for _, tt := range []struct {
		name string
		tr   *Tripped
		want bool
	}{
		{"unknown (older record)", nil, false},
		{"chat", &Tripped{Operation: "chat", Model: "m"}, true},
		{"responses", &Tripped{Operation: "responses", Model: "m"}, true},
		{"completions", &Tripped{Operation: "completions", Model: "m"}, true},
		{"embeddings", &Tripped{Operation: "embeddings", Model: "m"}, true},
		{"chat of no model", &Tripped{Operation: "chat"}, false},
		{"the prober's checks", &Tripped{Operation: OperationHealthCheck}, true},
		{"images", &Tripped{Operation: "images", Model: "m"}, false},
		{"speech", &Tripped{Operation: "speech", Model: "m"}, false},
		{"no operation", &Tripped{Model: "m"}, false},
	} {
		if got := tt.tr.Checkable(); got != tt.want {
			t.Errorf("%s: Checkable = %v, want %v", tt.name, got, tt.want)
		}
	}
}

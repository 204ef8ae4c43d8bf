package config

import (
	"slices"
	"testing"
)

func TestReloadChanges(t *testing.T) {
	cur := Defaults()
	cur.Providers = []Provider{{Name: "p", Type: "openai", Keys: []Key{{ID: "k1", Value: NewSecret("sk-1")}}}}
	cur.Clients = []ClientKey{{ID: "team", Value: NewSecret("c-1")}}
	next := Defaults()
	next.Providers = []Provider{{Name: "p", Type: "openai", Keys: []Key{{ID: "k1", Value: NewSecret("sk-2")}}}}
	next.Clients = []ClientKey{{ID: "other", Value: NewSecret("c-2")}}
	if got := ReloadChanges(cur, next); len(got) != 0 {
		t.Fatalf("a secret and the client keys changed: %v, want nothing named", got)
	}
	next.Chains = map[string]Chain{"c": {Steps: []ChainStep{{Target: "p/m"}}}}
	next.Timeouts.Attempt++
	next.Providers[0].BaseURL = "http://elsewhere"
	if got := ReloadChanges(cur, next); !slices.Equal(got, []string{"chains", "providers", "timeouts"}) {
		t.Fatalf("got %v", got)
	}
	if cur.Providers[0].Keys[0].Value.Reveal() != "sk-1" {
		t.Fatal("the configuration in use was changed")
	}
}

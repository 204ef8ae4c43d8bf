package proxy

import (
	"fmt"
	"slices"
	"strings"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/hold"
)

// openBreakers names the providers of steps when every usable step is
// held by its provider's open circuit breaker (a trip hold, of the
// provider or of the step's model), "" when any is held otherwise or not
// at all. It reads the local hold table only (an answer's path, not the
// request's).
func (s *Service) openBreakers(steps []route.Step) string {
	var names []string
	for i := range steps {
		st := &steps[i]
		if !st.Usable() {
			continue
		}
		if !s.breakerOpen(st) {
			return ""
		}
		if !slices.Contains(names, st.Provider.Name) {
			names = append(names, st.Provider.Name)
		}
	}
	return strings.Join(names, "`, `")
}

// breakerOpen reports whether a trip hold covers the step.
func (s *Service) breakerOpen(st *route.Step) bool {
	key := ""
	if len(st.Provider.Keys) > 0 {
		key = st.Provider.Keys[0].HoldKey()
	}
	for _, r := range s.engine.Covering(st.Provider.Name, key, st.Model) {
		if r.Source == hold.SourceBreaker && (r.State == hold.StateHeld || r.State == hold.StateProbing) &&
			(r.Scope.Kind == hold.ScopeProvider || r.Scope.Kind == hold.ScopeProviderModel) {
			return true
		}
	}
	return false
}

// circuitOpenMessage is the message of a circuit_open answer: the
// providers whose breakers are open (openBreakers) and when to retry.
func circuitOpenMessage(providers string, retryAfter int) string {
	if strings.Contains(providers, "`, `") {
		return fmt.Sprintf("the circuit breakers of providers `%s` are open (they tripped after consecutive failures); retry after %d s", providers, retryAfter)
	}
	return fmt.Sprintf("the circuit breaker of provider `%s` is open (it tripped after consecutive failures); retry after %d s", providers, retryAfter)
}

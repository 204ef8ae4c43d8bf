package hold

import "switchyard.dev/shared/failure"

// Correlation: a model-level refusal (model_not_accessible, model_retired,
// region_blocked) holds one key+model; when Settings.CorrelateKeys keys of
// a provider are held for the same refusal of the same model, the model is
// gone for the provider, not for a key, and the provider+model is held too:
// a retired model costs that many calls fleet-wide, not one per key. The
// widened hold is probed like any other (one request, one key), and
// settles on its own; the key holds keep their ladders.

// corrKey names what the correlation counts: a provider, a model and a
// class.
type corrKey struct {
	provider, model string
	class           failure.Class
}

// correlated returns the count key of a record that counts: a live
// key+model hold of a model-level class.
func correlated(r Record) (corrKey, bool) {
	m := r.Class.Meaning()
	if r.Scope.Kind != ScopeKeyModel || !live(r) || !m.Holds || m.Scope != failure.ScopeKeyModel {
		return corrKey{}, false
	}
	return corrKey{r.Scope.Provider, r.Scope.Model, r.Class}, true
}

// countLocked adds d to the count of r (engine lock held).
func (e *Engine) countLocked(r Record, d int) {
	k, ok := correlated(r)
	if !ok {
		return
	}
	if n := e.corr[k] + d; n > 0 {
		e.corr[k] = n
	} else {
		delete(e.corr, k)
	}
}

// widenLocked reports whether a new hold rec brings its refusal to the
// correlation threshold with the provider+model not held yet, and the
// count (engine lock held). The count includes holds other instances
// wrote, so the fleet correlates, not one proxy.
func (e *Engine) widenLocked(rec Record) (bool, int) {
	k, ok := correlated(rec)
	if !ok {
		return false, 0
	}
	threshold := e.Policy().For(rec.Scope.Provider).CorrelateKeys
	n := e.corr[k]
	if threshold <= 0 || n < threshold {
		return false, n
	}
	wide := Scope{Kind: ScopeProviderModel, Provider: rec.Scope.Provider, Model: rec.Scope.Model}
	if cur := e.entries[wide.ID()]; cur != nil && live(cur.rec) {
		return false, n
	}
	return true, n
}

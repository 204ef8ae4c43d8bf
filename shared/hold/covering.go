package hold

// Covering returns the records of the holds that cover the target
// (provider, keyID, model): live ones and released ones still ramping. It
// is read-only, unlike Admit (which may hand out a probe or ask for a
// lease): for explanations of a routing decision, not for the request
// path.
func (e *Engine) Covering(provider, keyID, model string) []Record {
	ents, ok := e.covering(provider, keyID, model)
	if !ok {
		return nil
	}
	now := e.clock.Now()
	var out []Record
	for _, en := range ents {
		if en == nil {
			continue
		}
		if live(en.rec) || (en.rec.State == StateReleased && now.Before(en.rec.RampUntil)) {
			out = append(out, en.rec)
		}
	}
	return out
}

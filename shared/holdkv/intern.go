package holdkv

import "switchyard.dev/shared/hold"

// internLimit bounds an interner: past it the table starts over (the
// strings it gave out stay valid; later ones are shared anew).
const internLimit = 4096

// interner shares the strings that many records repeat (the provider, the
// key id, the source, who recorded it, the reason and code of a wave of
// holds) among the records a watch decodes, so that a table of 100,000
// holds keeps one copy of each instead of one per record. Only the watch
// goroutine uses it.
type interner map[string]string

func (in interner) str(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := in[s]; ok {
		return v
	}
	if len(in) >= internLimit {
		clear(in)
	}
	in[s] = s
	return s
}

// record interns rec's repeated fields in place.
func (in interner) record(rec *hold.Record) {
	rec.Scope.Provider = in.str(rec.Scope.Provider)
	rec.Scope.Key = in.str(rec.Scope.Key)
	rec.Reason = in.str(rec.Reason)
	rec.Code = in.str(rec.Code)
	rec.Fingerprint = in.str(rec.Fingerprint)
	rec.Source = in.str(rec.Source)
	rec.RecordedBy = in.str(rec.RecordedBy)
	rec.ReleasedBy = in.str(rec.ReleasedBy)
	rec.ReleaseSource = in.str(rec.ReleaseSource)
	if rec.Probe != nil {
		rec.Probe.Owner = in.str(rec.Probe.Owner)
	}
}

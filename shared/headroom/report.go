package headroom

import "time"

// Prefix is the subject prefix of headroom reports:
// switchyard.headroom.<provider>, core NATS (not kept in a stream).
const Prefix = "switchyard.headroom"

// Subject is the subject of a provider's headroom reports.
func Subject(provider string) string { return Prefix + "." + provider }

// ReportVersion is the version of the Report JSON.
const ReportVersion = 1

// Report is what one process learnt of a provider's windows from its
// answers since its previous report: every proxy applies the others', and
// the admin service shows them. Counts only, never a secret.
type Report struct {
	Version  int          `json:"v"`
	Provider string       `json:"provider"`
	Instance string       `json:"instance"`
	At       time.Time    `json:"at"`
	Slots    []ReportSlot `json:"slots"`
}

// ReportSlot is one key's windows (Model set: one model's on the key).
type ReportSlot struct {
	Key     string         `json:"key"`
	Model   string         `json:"model,omitempty"`
	Windows []ReportWindow `json:"windows"`
}

// ReportWindow is one window as the provider last stated it.
type ReportWindow struct {
	Kind      string    `json:"kind"`
	Limit     int64     `json:"limit,omitempty"`
	Remaining int64     `json:"remaining"`
	Reset     time.Time `json:"reset"`
	At        time.Time `json:"at"` // when the answer that stated it arrived
}

func wireWindow(w Snapshot) ReportWindow {
	return ReportWindow{Kind: w.Kind.String(), Limit: w.Limit, Remaining: w.Remaining,
		Reset: time.Unix(0, w.Reset).UTC(), At: time.Unix(0, w.At).UTC()}
}

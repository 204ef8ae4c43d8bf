package adminapi

import (
	"time"

	"switchyard.dev/shared/routingdoc"
)

// The routing configuration's API (/admin/config...).

// ConfigVersion is a stored version of the routing document as the API
// shows it (GET /admin/config/versions/{n}, the list of GET
// /admin/config/versions, a write's version).
type ConfigVersion struct {
	Version uint64    `json:"version"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
	Comment string    `json:"comment"`
	// Source is import, activate, rollback or edit.
	Source string `json:"source"`
	// FromVersion is the version restored (rollback) or edited (edit); 0
	// otherwise.
	FromVersion uint64 `json:"from_version"`
	// Replaces is the version that was active when this one was written.
	Replaces uint64 `json:"replaces"`
	// Edit describes a small edit.
	Edit string `json:"edit"`
	// SHA256 is the hex SHA-256 of the document as stored
	// (routingdoc.Sum).
	SHA256 string `json:"sha256"`
	// Active: this is the fleet's active version.
	Active bool `json:"active"`
	// ActiveRevision is the active pointer's revision (the active version
	// only): the base of the next write.
	ActiveRevision uint64 `json:"active_revision,omitempty"`
	// Document is the routing document (YAML or JSON text; secrets only
	// as env:/file: references); left out of lists.
	Document string `json:"document,omitempty"`
}

// ActiveConfig is GET /admin/config: the active version with its
// document, and what the admin instance routes with.
type ActiveConfig struct {
	ConfigVersion
	// AppliedVersion is the version this admin instance applies (0: its
	// file's); RoutingError the last version it could not apply.
	AppliedVersion int                 `json:"applied_version"`
	RoutingError   *routingdoc.Failure `json:"routing_error,omitempty"`
}

// VersionList is GET /admin/config/versions: every version, newest first
// (without documents).
type VersionList struct {
	ActiveVersion  uint64          `json:"active_version"`
	AppliedVersion int             `json:"applied_version"`
	Versions       []ConfigVersion `json:"versions"`
}

// ConfigDiff is GET /admin/config/diff: the changes from version From to
// version To.
type ConfigDiff struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
	routingdoc.Changes
}

// Preview is POST /admin/config/preview.
type Preview struct {
	// Valid: the document loads (config.LoadOverlay over the instance's
	// configuration); Errors are the loader's messages otherwise.
	Valid    bool     `json:"valid"`
	Errors   []string `json:"errors"`
	Warnings []string `json:"warnings"`
	// Diff is the change from the active version (from an empty document
	// when none is active); null when the document cannot be read.
	Diff *routingdoc.Changes `json:"diff"`
	// Unchanged: the document is the active one, byte for byte
	// (activating it would change nothing).
	Unchanged bool `json:"unchanged"`
	// ActiveVersion is the version compared with (0: none), Base its
	// active revision: pass it as base to activate, which then fails with
	// 409 if another version became active meanwhile.
	ActiveVersion uint64 `json:"active_version"`
	Base          uint64 `json:"base"`
}

// ConfigWrite is the answer of every configuration write.
type ConfigWrite struct {
	// Changed is false when the document was the active one already:
	// nothing was written (and Version is the active version).
	Changed bool          `json:"changed"`
	Version ConfigVersion `json:"version"`
	// Applied: the admin instance routes with the version (it waits up to
	// 2 s for it); the proxies and the prober apply it on their own.
	Applied bool `json:"applied"`
	// Instances is what every instance of the fleet that answered said of
	// the version written (waiting up to 2 s for each): applied, refused
	// (with the reason) or pending (no report of it yet); Summary counts
	// them. Absent when nothing was written.
	Instances []InstanceOutcome `json:"instances,omitempty"`
	Summary   *OutcomeSummary   `json:"summary,omitempty"`
}

// InstanceOutcome is one instance's answer to a version (a write's
// Instances, GET /admin/config/instances).
type InstanceOutcome struct {
	Instance string `json:"instance"`
	Service  string `json:"service"`
	// Outcome is OutcomeApplied, OutcomeRefused or OutcomePending.
	Outcome string `json:"outcome"`
	// RoutingVersion is the version the instance routes with.
	RoutingVersion uint64 `json:"routing_version"`
	// Error is why it refused the version.
	Error string `json:"error,omitempty"`
}

// OutcomeSummary counts the outcomes of a version.
type OutcomeSummary struct {
	Applied int `json:"applied"`
	Refused int `json:"refused"`
	Pending int `json:"pending"`
}

// Outcomes of a version on an instance.
const (
	OutcomeApplied = "applied"
	OutcomeRefused = "refused"
	OutcomePending = "pending"
)

// InstanceList is GET /admin/config/instances: what every instance that
// answered says of the active version.
type InstanceList struct {
	ActiveVersion uint64            `json:"active_version"`
	Instances     []InstanceOutcome `json:"instances"`
	Summary       OutcomeSummary    `json:"summary"`
}

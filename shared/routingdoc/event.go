package routingdoc

import (
	"time"

	"switchyard.dev/shared/bus"
)

// EventKind is the kind token of configuration events.
const EventKind = "config"

// EventsFilter is the subject filter of every configuration event.
const EventsFilter = bus.EventsPrefix + "." + EventKind + ".>"

// EventSubject is the subject of the event of a write:
// switchyard.events.config.<source> (import, activate, rollback, edit).
// The SWITCHYARD_EVENTS stream captures it; switchyard.events.config.>
// follows every configuration change.
func EventSubject(src Source) string { return bus.EventsPrefix + "." + EventKind + "." + string(src) }

// Event is published after each write that moved the active pointer: one
// per activation fleet-wide (a lost import or activation publishes
// nothing).
type Event struct {
	V    int    `json:"v"`
	Kind string `json:"kind"` // "config"
	// Version is the version now active, ActiveRevision the pointer's new
	// revision (the base of the next write).
	Version        uint64    `json:"version"`
	ActiveRevision uint64    `json:"active_revision"`
	Source         Source    `json:"source"`
	FromVersion    uint64    `json:"from_version,omitempty"`
	Replaces       uint64    `json:"replaces,omitempty"`
	SHA256         string    `json:"sha256"`
	By             string    `json:"by"`
	At             time.Time `json:"at"`
	Comment        string    `json:"comment,omitempty"`
	Edit           string    `json:"edit,omitempty"`
}

// EventOf is the event of version v made active.
func EventOf(v Version) Event {
	return Event{
		V: SchemaVersion, Kind: EventKind, Version: v.Version, ActiveRevision: v.ActiveRevision,
		Source: v.Source, FromVersion: v.FromVersion, Replaces: v.Replaces, SHA256: v.SHA256,
		By: v.By, At: v.At, Comment: v.Comment, Edit: v.Edit,
	}
}

// publish sends the event of v (best effort, core NATS: the bucket is the
// record; the stream keeps the event).
func (s *Store) publish(v Version, by string) {
	if s.nc == nil {
		return
	}
	ev := EventOf(v)
	ev.By = by // the one who moved the pointer (an importer may adopt another's version 1)
	if err := s.nc.Publish(EventSubject(v.Source), mustJSON(ev)); err != nil {
		s.log.Warn("routingdoc: publish config event", "version", v.Version, "err", err)
	}
}

// Package routingdoc keeps the fleet's routing configuration (the keys
// of config.RoutableKeys: providers, aliases, chains, clients, plans,
// prices, trip_on, resilience, routing) as versioned documents in NATS, with their
// history: storage, activation by compare-and-set, rollback, the watch
// every service applies new versions from, a structured diff of two
// documents (Diff) and small edits (SetStepActive, SetKeyField, AddKey,
// SetTripRules, applied through Store.Edit). It does not validate a
// configuration beyond its form: the services pass a closure over
// config.LoadDocument (WithValidate), and every write runs it before it
// writes anything, so an invalid document never becomes active.
//
// # The switchyard_config bucket (a public contract)
//
// The bucket is made by bus.Setup (bus.BucketConfig, bus.Resources.Config):
// no TTL, bus.ConfigHistory revisions per key. It has two kinds of keys,
// both with JSON values carrying a schema version "v" (SchemaVersion):
//
//   - version.<N> (N decimal, from 1): one stored version, written once
//     (only if the key was never written) and never changed:
//
//     {"v":1,"version":7,"document":"providers:\n  - name: openai\n...",
//     "sha256":"<hex of document>","by":"alice","at":"2025-06-01T10:00:00Z",
//     "comment":"move traffic to eu","source":"rollback","from_version":3,
//     "replaces":6}
//
//     document is the routing document as activated, YAML or JSON text;
//     secrets appear only as env:/file: references (validation refuses
//     inline values). source is import (the file, on the fleet's first
//     start), activate, rollback (from_version: the version restored) or
//     edit (from_version: the version edited; edit: a short description
//     such as "chains.default.steps[1].active: true -> false"). replaces
//     is the version that was active when this one was written.
//
//   - active: the pointer to the version every instance applies, created
//     by the first import and then changed only by compare-and-set; its
//     history (16 revisions) is the recent activation trail:
//
//     {"v":1,"version":7,"by":"alice","at":"2025-06-01T10:00:00Z"}
//
// A write stores version.<N> first and then moves the pointer from the
// revision it was based on. A write that loses (another activation moved
// the pointer first) purges its version key and reports ErrConflict; the
// number stays taken, so version numbers can have gaps but never name two
// documents. A pointer is never written to a version that does not exist.
//
// Every write that moves the pointer publishes an Event on
// switchyard.events.config.<source> (captured by SWITCHYARD_EVENTS), one
// per activation fleet-wide:
//
//	{"v":1,"kind":"config","version":4,"active_revision":8,"source":"activate",
//	"replaces":3,"sha256":"...","by":"alice","at":"...","comment":"..."}
//
// With the nats CLI (TestNatsCLI runs these):
//
//	nats kv ls switchyard_config                    # version.1, version.2, ..., active
//	nats kv get switchyard_config active --raw      # {"v":1,"version":2,"by":"alice","at":"..."}
//	nats kv get switchyard_config version.2 --raw   # the version's JSON, document included
//	nats kv history switchyard_config active        # the activation trail (a table, values cut short)
//	nats kv get switchyard_config active --revision 4 --raw   # one activation of the trail in full
//	nats sub 'switchyard.events.config.>'           # each activation as it happens
//
// (nats kv get switchyard_config version.2 --raw | jq -r .document prints
// the document itself.) Do not put the pointer by hand: the writes of
// this package validate a document before it can become active, a hand
// put does not; a pointer to a version that cannot be read is skipped by
// every watcher.
//
// # Concurrency
//
// Import creates the pointer only if absent: when every instance imports
// its file at first start, one wins and the others get ErrExists (and
// follow the active version). Activate, Rollback and Edit take base, the
// pointer revision the operator previewed against (Version.ActiveRevision
// of Active or Watch); when the pointer has moved they fail with
// ErrConflict (HTTP 409). base 0 means "whatever is active when the call
// reads it": still a compare-and-set from that revision.
package routingdoc

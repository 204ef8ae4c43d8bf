// Package adminapi holds the admin service's wire types: the JSON bodies
// of its HTTP API (/admin/...) as the service sends them and as clients
// (swctl) decode them. The admin service builds its answers from these
// types and swctl reads them with the same ones, so a field added to an
// answer reaches the CLI without being copied by hand.
//
// It lives in the admin service's module, beside the server that owns the
// API, rather than in shared/ (the domain every service uses): only the
// admin service and its clients need it, and the tools module already
// requires the admin module (the all-in-one launcher starts it). It
// imports nothing of the service: only shared packages whose records the
// API shows as they are (hold.Record, routingdoc.Changes).
package adminapi

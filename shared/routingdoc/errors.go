package routingdoc

import "errors"

// Sentinel errors; match them with errors.Is.
var (
	// ErrNoActive: the bucket has no active version yet (nothing imported).
	ErrNoActive = errors.New("routingdoc: no active configuration version")
	// ErrNotFound: the version asked for does not exist, or an edit names
	// a chain, step, provider or key the document does not have.
	ErrNotFound = errors.New("routingdoc: not found")
	// ErrExists: Import found an active version (another instance
	// imported first); use the active one.
	ErrExists = errors.New("routingdoc: an active configuration version exists")
	// ErrConflict: the active pointer moved away from the revision the
	// write was based on (another activation won); nothing was activated.
	ErrConflict = errors.New("routingdoc: the active configuration changed meanwhile")
	// ErrUnchanged: the document is the active version's, byte for byte;
	// nothing was written.
	ErrUnchanged = errors.New("routingdoc: the document is the active one")
	// ErrInvalid: the document is not well formed, fails the Validate
	// option, or an edit's arguments are unusable; nothing was written.
	ErrInvalid = errors.New("routingdoc: invalid configuration document")
	// ErrUnavailable: NATS or the bucket did not answer (or the Store is
	// not bound yet). A write that fails this way while moving the pointer
	// may or may not have activated its version: read Active to know.
	ErrUnavailable = errors.New("routingdoc: NATS unavailable")
)

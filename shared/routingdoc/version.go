package routingdoc

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"switchyard.dev/shared/config"
)

// SchemaVersion is the "v" of the values this package writes; values with
// a higher one are not read.
const SchemaVersion = 1

// Keys of the switchyard_config bucket.
const (
	// KeyActive is the pointer to the active version.
	KeyActive = "active"
	// versionPrefix starts the key of a version: version.<N>.
	versionPrefix = "version."
)

// VersionKey is the bucket key of version n: "version.<n>".
func VersionKey(n uint64) string { return versionPrefix + strconv.FormatUint(n, 10) }

// parseVersionKey returns the number of a version key.
func parseVersionKey(key string) (uint64, bool) {
	s, ok := strings.CutPrefix(key, versionPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && n > 0
}

// Source says how a version came to be.
type Source string

// The sources.
const (
	// SourceImport: the configuration file's routing keys, imported when
	// the fleet had no active version.
	SourceImport Source = "import"
	// SourceActivate: a document an operator activated.
	SourceActivate Source = "activate"
	// SourceRollback: the document of an earlier version (FromVersion),
	// activated again.
	SourceRollback Source = "rollback"
	// SourceEdit: a small edit (Edit) of the version FromVersion.
	SourceEdit Source = "edit"
)

// Version is one stored version of the routing configuration: the value
// of key version.<N>, written once and never changed.
type Version struct {
	V       int    `json:"v"`
	Version uint64 `json:"version"`
	// Document is the routing document as activated (YAML or JSON text;
	// secrets only as env:/file: references). List leaves it empty.
	Document string `json:"document,omitempty"`
	// SHA256 is the hex SHA-256 of Document.
	SHA256  string    `json:"sha256"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
	Comment string    `json:"comment,omitempty"`
	Source  Source    `json:"source"`
	// FromVersion is the version whose document this one came from: the
	// version restored (rollback) or edited (edit); 0 otherwise.
	FromVersion uint64 `json:"from_version,omitempty"`
	// Replaces is the version that was active when this one was written
	// (0 for the first).
	Replaces uint64 `json:"replaces,omitempty"`
	// Edit describes a small edit ("chains.default.steps[1].active: true
	// -> false"); edits only.
	Edit string `json:"edit,omitempty"`

	// Revision is the bucket revision of version.<N>.
	Revision uint64 `json:"-"`
	// ActiveRevision is the revision of the active pointer that named
	// this version when it was read as the active one (Active, Watch, and
	// the result of a write); pass it as base to the next write. 0 when
	// the version was not read through the pointer.
	ActiveRevision uint64 `json:"-"`
}

// Pointer is the value of key active: the version every instance applies.
type Pointer struct {
	V       int       `json:"v"`
	Version uint64    `json:"version"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
}

// Meta says who writes a version and why.
type Meta struct {
	// By names who writes: an operator (the admin token's name) or an
	// instance (for an import). Required.
	By string
	// Comment is free text kept with the version.
	Comment string
	// Edit describes a small edit (Store.Edit); when empty Edit writes a
	// summary of the changes (Summary).
	Edit string
}

// Sum returns the hex SHA-256 of doc.
func Sum(doc []byte) string {
	h := sha256.Sum256(doc)
	return hex.EncodeToString(h[:])
}

func decodeVersion(key string, rev uint64, data []byte) (Version, error) {
	var v Version
	if err := json.Unmarshal(data, &v); err != nil {
		return Version{}, fmt.Errorf("routingdoc: decode %s (revision %d): %w", key, rev, err)
	}
	if v.V > SchemaVersion {
		return Version{}, fmt.Errorf("routingdoc: %s (revision %d) has schema version %d; this build reads up to %d",
			key, rev, v.V, SchemaVersion)
	}
	if n, ok := parseVersionKey(key); !ok || n != v.Version {
		return Version{}, fmt.Errorf("routingdoc: %s (revision %d) says it is version %d", key, rev, v.Version)
	}
	if Sum([]byte(v.Document)) != v.SHA256 {
		return Version{}, fmt.Errorf("routingdoc: %s (revision %d): document does not match its sha256", key, rev)
	}
	v.Revision = rev
	return v, nil
}

func decodePointer(rev uint64, data []byte) (Pointer, error) {
	var p Pointer
	if err := json.Unmarshal(data, &p); err != nil {
		return Pointer{}, fmt.Errorf("routingdoc: decode %s (revision %d): %w", KeyActive, rev, err)
	}
	if p.V > SchemaVersion {
		return Pointer{}, fmt.Errorf("routingdoc: %s (revision %d) has schema version %d; this build reads up to %d",
			KeyActive, rev, p.V, SchemaVersion)
	}
	if p.Version == 0 {
		return Pointer{}, fmt.Errorf("routingdoc: %s (revision %d) names no version", KeyActive, rev)
	}
	return p, nil
}

// wellFormed checks what the store itself requires of a document: a YAML
// or JSON mapping whose top-level keys are routing keys
// (config.RoutableKeys). Whether it is a valid configuration is the
// Validate option's call.
func wellFormed(doc []byte) error {
	if len(strings.TrimSpace(string(doc))) == 0 {
		return fmt.Errorf("%w: empty document", ErrInvalid)
	}
	var raw any
	if err := yaml.Unmarshal(doc, &raw); err != nil {
		return fmt.Errorf("%w: not a YAML or JSON document: %w", ErrInvalid, err)
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("%w: the document is not a mapping of routing keys (%s)", ErrInvalid,
			strings.Join(config.RoutableKeys, ", "))
	}
	var bad []error
	for _, k := range sortedKeys(m) {
		if !slices.Contains(config.RoutableKeys, k) {
			bad = append(bad, fmt.Errorf("%w: %s: not part of the routing configuration (routable keys: %s)",
				ErrInvalid, k, strings.Join(config.RoutableKeys, ", ")))
		}
	}
	return errors.Join(bad...)
}

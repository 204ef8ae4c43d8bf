// This file fixes the contracts between the engine, its store (NATS KV in
// production, see package holdkv) and the proxy; doc.go describes the
// engine.

package hold

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"switchyard.dev/shared/failure"
)

// SchemaVersion is the version of the Record JSON.
const SchemaVersion = 1

// ScopeKind is what a hold covers.
type ScopeKind string

// The scope kinds.
const (
	ScopeProvider      ScopeKind = "provider"
	ScopeProviderModel ScopeKind = "provider+model"
	ScopeKey           ScopeKind = "key"
	ScopeKeyModel      ScopeKind = "key+model"
)

// Scope is the set of targets a hold covers. Key is "" for provider
// scopes; Model is "" for scopes without a model.
type Scope struct {
	Kind     ScopeKind `json:"kind"`
	Provider string    `json:"provider"`
	Key      string    `json:"key,omitempty"`
	Model    string    `json:"model,omitempty"`
}

// anyKey stands for "every key" in an encoded scope. Key ids must start
// with a letter or digit, so it never collides with one.
const anyKey = "_"

// ID is the scope's KV key and subject suffix:
// <provider>.<key id or _>[.<encoded model>]. Provider names and key ids
// are restricted by config validation to [A-Za-z0-9_-]; the model is
// encoded with EncodeToken.
func (s Scope) ID() string {
	k := s.Key
	if k == "" {
		k = anyKey
	}
	id := s.Provider + "." + k
	if s.Model != "" {
		id += "." + EncodeToken(s.Model)
	}
	return id
}

// ParseID is the inverse of Scope.ID.
func ParseID(id string) (Scope, error) {
	parts := strings.Split(id, ".")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return Scope{}, errors.New("hold id: want <provider>.<key|_>[.<model>]: " + id)
	}
	s := Scope{Provider: parts[0]}
	if parts[1] != anyKey {
		s.Key = parts[1]
	}
	if len(parts) == 3 {
		m, err := DecodeToken(parts[2])
		if err != nil {
			return Scope{}, err
		}
		s.Model = m
	}
	switch {
	case s.Key == "" && s.Model == "":
		s.Kind = ScopeProvider
	case s.Key == "":
		s.Kind = ScopeProviderModel
	case s.Model == "":
		s.Kind = ScopeKey
	default:
		s.Kind = ScopeKeyModel
	}
	return s, nil
}

// MaxIDLen is the longest hold id, in bytes, the engine records and a
// store writes. The id is a KV key, so it is part of the subject of every
// write: NATS refuses a protocol line past its max_control_line (4 KB by
// default) and closes the connection for good, which would cut a process
// off from the fleet. The bound keeps ids well under that, and still fits
// the longest model name the proxy accepts (256 bytes, 768 once encoded)
// with a provider name and a key id.
const MaxIDLen = 900

// MaxStoredIDLen is the longest id of a record a store still reads,
// updates and deletes: earlier versions created records with ids past
// MaxIDLen (a long unlisted model name), which must stay releasable. It
// keeps a write's protocol line (the subject with the bucket's prefix, a
// reply inbox and sizes) under NATS's default max_control_line of 4 KB.
const MaxStoredIDLen = 3500

// CheckID reports whether a record of id can be created: ErrInvalidID
// when it is longer than MaxIDLen.
func CheckID(id string) error {
	return checkIDLen(id, MaxIDLen)
}

// CheckStoredID reports whether a stored record of id can be read,
// updated or deleted: ErrInvalidID when it is longer than MaxStoredIDLen.
func CheckStoredID(id string) error {
	return checkIDLen(id, MaxStoredIDLen)
}

func checkIDLen(id string, limit int) error {
	if len(id) > limit {
		return fmt.Errorf("%w: %d bytes (%.40s...), at most %d", ErrInvalidID, len(id), id, limit)
	}
	return nil
}

// EncodeToken encodes a name (a model such as "gpt-4.1" or
// "openrouter/auto:free") into one KV key / subject token: letters, digits
// and '-' stay; every other byte becomes "=XX" (upper-case hex). It is
// reversible with DecodeToken.
func EncodeToken(s string) string {
	return string(AppendToken(make([]byte, 0, len(s)+8), s))
}

// AppendToken appends EncodeToken(s) to b.
func AppendToken(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b = append(b, c)
			continue
		}
		b = append(b, '=', hex[c>>4], hex[c&0xf])
	}
	return b
}

// DecodeToken is the inverse of EncodeToken.
func DecodeToken(t string) (string, error) {
	if !strings.Contains(t, "=") {
		return t, nil
	}
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if t[i] != '=' {
			b.WriteByte(t[i])
			continue
		}
		if i+2 >= len(t) {
			return "", errors.New("hold: bad token escape in " + t)
		}
		hi, lo := unhex(t[i+1]), unhex(t[i+2])
		if hi < 0 || lo < 0 {
			return "", errors.New("hold: bad token escape in " + t)
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// State is where a hold is in its lifecycle.
type State string

// The states of a hold record.
const (
	StateHeld     State = "held"     // out of rotation until Until
	StateProbing  State = "probing"  // due, one probe out (Probe says whose, until when)
	StateReleased State = "released" // back in rotation through the ramp until RampUntil
)

// Probe is the fleet-wide right to re-check a due hold.
type Probe struct {
	Owner      string    `json:"owner"`       // instance id of the prober
	Started    time.Time `json:"started"`     // when the lease was taken
	LeaseUntil time.Time `json:"lease_until"` // the lease lapses after this
}

// Record is one hold as stored in the switchyard_holds bucket (JSON). It
// never contains a secret: keys are named by id and fingerprint.
type Record struct {
	Version     int           `json:"v"`
	ID          string        `json:"id"` // Scope.ID()
	Scope       Scope         `json:"scope"`
	State       State         `json:"state"`
	Class       failure.Class `json:"class"`
	Rung        int           `json:"rung"`
	Since       time.Time     `json:"since"`       // when the scope was first held
	Until       time.Time     `json:"until"`       // when the hold becomes due
	RampUntil   time.Time     `json:"ramp_until"`  // released: full weight from then on
	Reason      string        `json:"reason"`      // short, human; no secrets
	Code        string        `json:"code"`        // the provider's error code
	Fingerprint string        `json:"fingerprint"` // of the key's secret, when a key is held
	Source      string        `json:"source"`      // proxy, prober, breaker, admin, rule
	RecordedBy  string        `json:"recorded_by"` // instance id
	RecordedAt  time.Time     `json:"recorded_at"`
	Pinned      bool          `json:"pinned"` // operator pin: not probed before Until
	// ReleasedBy and ReleaseSource say who released a released record (an
	// instance id) and why: probe, prober, admin, credential or expired.
	ReleasedBy    string `json:"released_by,omitempty"`
	ReleaseSource string `json:"release_source,omitempty"`
	Probe         *Probe `json:"probe,omitempty"`
	// ProbeSuccesses counts the consecutive successful probes of a trip
	// hold (class transient, source breaker) so far, while
	// breaker.success_threshold asks for more than one: the hold stays
	// held, due again at once, until the count reaches the threshold. A
	// failed probe resets it; a release clears it.
	ProbeSuccesses int `json:"probe_successes,omitempty"`
	// Tripped says what a breaker's trip hold (source breaker) was tripped
	// by, so that its probe exercises it; nil on other holds, and on trip
	// holds that older versions recorded.
	Tripped *Tripped `json:"tripped,omitempty"`
	// WaitStated: Until is a wait the provider stated (Retry-After and
	// the like) or a trip_on rule's hold_ttl. No early (soft) probe cuts
	// it short: the hold is probed when it is due.
	WaitStated bool `json:"wait_stated,omitempty"`
	// EarlyProbeAfter is the earliest time an early (soft) probe may
	// lease this hold again: set by the compare-and-set that takes a
	// probe lease (early or due) to that time plus EarlyProbeInterval, so
	// the fleet sends at most one early probe of a hold per interval, and
	// none right after a due probe.
	EarlyProbeAfter time.Time `json:"early_probe_after,omitzero"`

	// Revision is the store's revision of this value (not serialised).
	Revision uint64 `json:"-"`
}

// Tripped is the operation and model of the last failure a circuit
// breaker counted before it tripped. A models list or a health check can
// pass while that operation still fails, so the prober settles a trip
// hold only with a one-token request of that operation and model (see
// the prober's cheap checks); without one (an operation it cannot send
// cheaply, or no record of it) the hold is left to a caller's request.
type Tripped struct {
	// Operation is chat, completions or embeddings (as the prober sends
	// them), or another operation's name (images, speech, ...).
	Operation string `json:"operation"`
	// Model is the configured model that failed ("" when unknown).
	Model string `json:"model,omitempty"`
}

// Checkable reports whether the prober can send what tripped the breaker
// as a cheap request: a one-token chat, Responses (as chat), completions
// or embeddings request of a known model, or its own check again. Nil (a
// trip older versions recorded) is not.
func (t *Tripped) Checkable() bool {
	if t == nil {
		return false
	}
	switch t.Operation {
	case OperationHealthCheck:
		return true
	case "chat", "responses", "completions", "embeddings":
		return t.Model != ""
	}
	return false
}

// OperationHealthCheck is the Operation of the prober's own checks (its
// health check or models list): a breaker they trip is settled by the
// check again.
const OperationHealthCheck = "health_check"

// Sentinel errors of a Store.
var (
	// ErrExists: Create found a record already there.
	ErrExists = errors.New("hold: record exists")
	// ErrConflict: a compare-and-set lost (the revision moved).
	ErrConflict = errors.New("hold: revision conflict")
	// ErrNotFound: no record for that id.
	ErrNotFound = errors.New("hold: not found")
	// ErrUnavailable: the store cannot be reached (NATS down).
	ErrUnavailable = errors.New("hold: store unavailable")
	// ErrInvalidID: the record's id is not one the store can hold (longer
	// than MaxIDLen, or not a valid KV key). Writing it again would fail
	// the same way.
	ErrInvalidID = errors.New("hold: invalid hold id")
	// ErrNotOwner: ProbeResult for a hold whose probe lease this instance
	// does not hold.
	ErrNotOwner = errors.New("hold: probe lease not held by this instance")
)

// Store keeps hold records, shared by the fleet. Every write is a
// compare-and-set so that exactly one writer wins each transition.
type Store interface {
	// Create stores rec if no live record exists for rec.ID; it returns
	// the stored revision, or ErrExists. ttl > 0 makes the record expire
	// by itself (released records expire when their ramp ends).
	Create(ctx context.Context, rec Record, ttl time.Duration) (uint64, error)
	// Update replaces the record at revision rev (ErrConflict if it moved).
	Update(ctx context.Context, rec Record, rev uint64, ttl time.Duration) (uint64, error)
	// Delete removes the record if it is still at revision rev (0 = any).
	Delete(ctx context.Context, id string, rev uint64) error
	// Get returns the current record (ErrNotFound).
	Get(ctx context.Context, id string) (Record, error)
	// Watch calls apply for every record present, then for every change,
	// until ctx ends. A deleted or expired record is delivered as
	// Change{ID, Deleted: true}. Changes arrive in revision order; after a
	// reconnect the watch resumes after the last revision delivered.
	Watch(ctx context.Context, apply func(Change)) error
}

// Change is one update seen by a Store watcher.
type Change struct {
	ID       string
	Record   Record // valid unless Deleted
	Deleted  bool
	Revision uint64
	// Initial is true for records delivered by the initial load.
	Initial bool
}

// Admission is the answer to "may this request use this target?".
type Admission uint8

// The admissions.
const (
	Admit      Admission = iota // in rotation (or chosen by the ramp)
	Deny                        // held, probing elsewhere, or not chosen by the ramp
	AdmitProbe                  // held and due: this request is the one probe (one attempt, no retry)
	// Deferred: back in rotation through the ramp, and this request was
	// not picked for it: use the target only when nothing else admits
	// (the ramp shares traffic among alternatives; it never refuses a
	// request only the ramping target can serve).
	Deferred
)

// Outcome is what an attempt on a target came to, reported to the engine.
type Outcome struct {
	OK bool
	// Result is the classification of a failure (when !OK).
	Result failure.Result
	// Cancelled: the caller went away; says nothing about the target. A
	// cancelled probe gives its lease back: the hold is due again at once.
	Cancelled bool
	// Unsent (with Cancelled): the probe's attempt was never sent (the
	// request stopped first). Its lease goes back untouched: an early
	// lease leaves the early-probe interval as it found it.
	Unsent bool
	// Retrying: the proxy will retry this same target, so this failure is
	// not the last of its retry sequence. The circuit breaker does not
	// count it: one exhausted retry sequence counts once (report the last
	// attempt with Retrying false). Holds are applied either way.
	Retrying bool
	// Status is the HTTP status of a failed attempt (0 for a transport
	// error or a local timeout); the breaker's failure_on_statuses filter
	// reads it.
	Status int
	// RequestID is the caller's request that made the attempt (its debug
	// bundle's id), carried by the hold, trip and probe events it causes.
	RequestID string
	// Sent is when the attempt was sent (zero: unknown). A failure of an
	// attempt sent before an operator released its hold (or rotated its
	// key's secret) says nothing about the target since: it does not hold
	// it again.
	Sent time.Time
	// Operation is what the attempt asked of the provider (chat,
	// completions, embeddings, ...): a breaker it trips records it
	// (Record.Tripped) so that the trip's probe exercises it.
	Operation string
}

// TallySchemaVersion is the version of the Tally JSON.
const TallySchemaVersion = 1

// Tally outcomes.
const (
	TallyFailure = "failure"
	TallySuccess = "success"
)

// Tally is one outcome a circuit breaker counted, shared with the fleet
// (JSON on switchyard.breaker.<provider>[.<encoded model>], core NATS, not
// kept in a stream): a counted failure, or a success that reset a count.
// Every engine applies the others' tallies to its own breaker
// (Engine.ApplyTally), so breaker.consecutive_failures counts the fleet's
// consecutive failures, not one process's.
type Tally struct {
	Version  int    `json:"v"`
	Provider string `json:"provider"`
	// Model is set for per-model breakers (breaker.scope model).
	Model   string `json:"model,omitempty"`
	Outcome string `json:"outcome"` // failure or success
	// Operation and TargetModel are what a failure asked of the provider
	// (Outcome.Operation, and the model, also for a provider's breaker):
	// the trip it may cause records them (Record.Tripped).
	Operation   string `json:"operation,omitempty"`
	TargetModel string `json:"target_model,omitempty"`
	// Consecutive is the sender's count after this outcome.
	Consecutive int       `json:"consecutive"`
	Instance    string    `json:"instance"`
	At          time.Time `json:"at"`
}

// TallySink sends this engine's tallies to the fleet. SendTally must not
// block (publishers queue, or drop and count).
type TallySink interface {
	SendTally(Tally)
}

func tallyOutcome(failed bool) string {
	if failed {
		return TallyFailure
	}
	return TallySuccess
}

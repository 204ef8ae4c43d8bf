package proxy

import (
	"log/slog"
	"sync/atomic"
	"time"

	"switchyard.dev/services/proxy/internal/clientkey"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/services/proxy/internal/telemetry"
	"switchyard.dev/services/proxy/internal/upstream"
	"switchyard.dev/shared/planlimit"
	"switchyard.dev/shared/usage"
)

// request is the state of one caller request across its attempts: what
// the whole request needs. What one attempt needs is its attempt value
// (failover.go); the parts below are grouped by who reads them.
type request struct {
	s      *Service
	rt     *routing // the routing the request started with (to its end)
	ep     *endpoint
	id     string
	model  string
	stream bool
	body   []byte // the caller's body (valid during the handler only)
	// contentType is a multipart request's (transcriptions), with its
	// boundary.
	contentType string
	deadline    time.Time // zero: none
	// relayDeadline bounds a stream once it is relayed: timeouts.request
	// alone. A caller's stated timeout (X-Stainless-Timeout) is the SDK's
	// wait for the answer to begin (or between reads), not a cap on a
	// stream that keeps delivering. Zero: none.
	relayDeadline time.Time
	started       time.Time
	log           *slog.Logger

	// For metrics: the model name when it resolved, and the outcome class
	// ("" derives it from the status).
	resolved string
	class    string

	client *clientkey.Key   // the caller's gateway key (nil: anonymous)
	ticket planlimit.Ticket // admitted by the plan's limits (the zero Ticket: none)
	idem   idempotency
	sel    selection
	tally  tally
	by     servedBy
	use    usageNote
	caller callerLink
	trans  translations
	trace  bundleTrace       // for the debug bundle (bundle.go)
	tc     telemetry.Context // the W3C trace context it joins and carries upstream
}

// idempotency is the caller's Idempotency-Key and where it goes.
type idempotency struct {
	key      string // valid (takeIdempotencyKey); "": none
	provider string // the first attempt's provider: the key goes to its every attempt, not elsewhere
}

// selection is what routing knows of the request, and the walk over its
// route's candidates.
type selection struct {
	route *route.Route
	req   route.Request
	cur   route.Cursor
	room  route.Room // req.Room's (headroom routing on)
	cache *cacheNote // the cache's part (cache.go); nil: no policy applies
}

// tally counts the request's attempts and keeps its failures.
type tally struct {
	attempts int
	// rateLimited counts the attempts that ended rate limited: when all
	// did, the caller is told 429, not 502.
	rateLimited int
	last        *attemptError // the last failure, for the final error message
	// failed are the failed attempts by target, for the usage record
	// (failed_attempts): usage counts them under the key that failed.
	failed []usage.FailedAttempt
}

// servedBy is the target that served the request (setServedBy).
type servedBy struct {
	provider string
	provType string
	keyID    string
	upModel  string // the model as the provider that served names it
}

// usageNote is what the usage record (meter.go) needs beyond what served
// the request: whether it reached routing (only those are metered), the
// caller's client type, its tokens and timings.
type usageNote struct {
	routed      bool
	clientType  string
	tokens      usage.Tokens
	tokensOK    bool  // the provider reported usage
	estIn       int64 // estimated input tokens (tokens.Estimate)
	estOut      int64 // estimated output tokens (when none reported)
	callerUsage bool  // the caller asked for stream usage (stream_options.include_usage)
	ttft        time.Duration
	streamDone  bool // the stream reached its terminal event
	cancelled   bool // the caller hung up
	// guard is the strongest verdict the request's guardrails reached
	// (block, redact, warn; "" none acted), by which and at which stage.
	guard, guardBy, guardStage string
}

// callerLink is the request's link to its caller's connection (the caller
// watch, caller.go).
type callerLink struct {
	// gone is set when the caller closed its connection while the request
	// waited on upstreams (callerWatch): no further attempt is made, the
	// one in flight is interrupted, and nothing counts against a target.
	gone   atomic.Bool
	goneCh chan struct{} // closed when gone is set; made on first use (goneC), under the caller watch's lock
	// sending is when the attempt in flight was about to be written
	// (sendingNow; 0 between attempts), for callerGone.
	sending atomic.Int64
	watch   watchLink // in the caller watch's list while the handler runs, and its relay
	// relayUp is the upstream connection a relay (a stream, speech) reads
	// its answer from, set before the relay starts (nil: none): a caller
	// that goes away cuts its read (callerGone). The relay leaves the
	// caller watch before it lets the connection go.
	relayUp atomic.Pointer[upstream.Conn]
	// idChosen: the caller gave the request id (X-Request-Id), which
	// another request may carry too.
	idChosen bool
}

// translations are the request's body translated per upstream format,
// built on first use (translatedFor).
type translations struct {
	bodies [2][]byte
	errs   [2]error
}

package proxy

import (
	"crypto/sha256"
	"hash"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/trace"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/usage"
)

// Debug bundles. The request path notes what happened in fixed-size fields
// of the request (attempts in a small inline array, digests as raw sums,
// the cursor's order and reasons), with no I/O and no JSON. When the
// request ends, the request itself is queued (a bounded channel: a full
// queue drops the bundle, counted); a background worker builds the bundle,
// looks up the holds of the keys the request skipped, publishes it to
// SWITCHYARD_DEBUG and hands it to the trace exporter.

// headerDebug asks for a bundle of this request whatever the sampling.
const headerDebug = "X-Switchyard-Debug"

// maxErrorMessage bounds a provider error message kept in a bundle.
const maxErrorMessage = 300

// attemptRec is one attempt as the request path notes it.
type attemptRec struct {
	step      *route.Step
	key       *route.Key
	start     time.Duration // from the request's arrival
	dur       time.Duration
	ttft      time.Duration
	status    int
	class     failure.Class
	failed    bool
	code      string
	reason    string // unmasked: masked when the bundle is built
	body      []byte // the provider's error body (its own copy), read when the bundle is built
	action    string
	backoff   time.Duration
	probe     bool
	soft      bool
	completed bool // a stream reached its terminal event
	span      trace.SpanID
}

// bundleTrace is what a request notes for its bundle (on the request: no
// allocation until more than four attempts).
type bundleTrace struct {
	on        bool // bundles or traces are on for this proxy
	forced    bool
	sampled   string // why its bundle is kept (bundler.sample); "": not kept
	reqSum    [sha256.Size]byte
	reqPrefix [sha256.Size]byte
	reqLen    int
	resp      hash.Hash // a stream's relayed bytes (nil: not hashed)
	respHead  hash.Hash // their first debug.PrefixBytes
	respBody  []byte    // a plain response (the handler's buffer) until done hashes it
	respSum   [sha256.Size]byte
	respPre   [sha256.Size]byte
	respLen   int
	respOK    bool
	errCode   string
	limits    *debug.LimitDecision
	policy    *debug.Policy             // the plan's rules and the guardrails attached (policy)
	guards    []debug.GuardrailDecision // the guardrails' decisions (guardrails.go)
	access    string
	log       []attemptRec
	// The request's final status and duration, and its usage record.
	status int
	ended  time.Duration
	rec    *usage.Record
}

// startTrace starts a request's trace when bundles or traces are on:
// X-Switchyard-Debug is read at once, so that a request refused before
// its body is read keeps its bundle when its caller asked for it.
func (r *request) startTrace(c *fiber.Ctx, on bool) {
	r.trace.on = on
	r.trace.forced = on && strings.EqualFold(c.Get(headerDebug), "true")
}

// noteRequest notes the request's body once it is known.
func (r *request) noteRequest(c *fiber.Ctx) {
	t := &r.trace
	if !t.on {
		return
	}
	t.reqLen = len(r.body)
	t.reqSum = sha256.Sum256(r.body)
	t.reqPrefix = sha256.Sum256(r.body[:min(len(r.body), debug.PrefixBytes)])
	t.log = make([]attemptRec, 0, 4) // made only when tracing: a request without it stays small
}

// beginAttempt notes an attempt about to be sent; the index is for
// endAttempt.
func (r *request) beginAttempt(step *route.Step, key *route.Key, probe, soft bool) int {
	t := &r.trace
	if !t.on {
		return -1
	}
	t.log = append(t.log, attemptRec{step: step, key: key, start: time.Since(r.started), probe: probe, soft: soft, span: r.tc.NewSpan()})
	return len(t.log) - 1
}

// attemptEnded notes how the attempt at ended in the bundle: served, or
// failed and what the proxy does next (action).
func (t *bundleTrace) attemptEnded(at *attempt, ae *attemptError, action string, since time.Duration) {
	if at.trace < 0 {
		return
	}
	a := &t.log[at.trace]
	a.dur = since - a.start
	a.ttft = at.latency
	a.action = action
	if ae == nil {
		a.status = 200
		return
	}
	a.failed, a.status, a.class, a.code = true, ae.status, ae.result.Class, ae.result.Code
	a.reason, a.body = ae.reason(), ae.body
}

// noteBackoff adds a backoff waited after attempt i.
func (r *request) noteBackoff(i int, d time.Duration) {
	if i >= 0 {
		r.trace.log[i].backoff += d
	}
}

// noteResponse keeps the digest of a plain response and the error code of
// a refusal (in the handler: the response buffer is reused after it).
func (r *request) noteResponse(c *fiber.Ctx) {
	t := &r.trace
	if !t.on {
		return
	}
	body := c.Response().Body()
	t.respLen, t.respOK = len(body), true
	t.respBody = body // hashed in bundler.done, only for a bundle that is kept
	if c.Response().StatusCode() >= 400 {
		if e, _, _, ok := jsonfield.Find(body, "error"); ok {
			code, _ := jsonfield.String(e, "code")
			if code == "" {
				code, _ = jsonfield.String(e, "type")
			}
			t.errCode = code
		}
	}
}

// noteStream hashes bytes relayed to the caller.
func (r *request) noteStream(b []byte) {
	t := &r.trace
	if !t.on {
		return
	}
	if t.resp == nil {
		t.resp, t.respHead = sha256.New(), sha256.New()
	}
	t.resp.Write(b)
	if t.respLen < debug.PrefixBytes {
		t.respHead.Write(b[:min(len(b), debug.PrefixBytes-t.respLen)])
	}
	t.respLen += len(b)
}

// policy is the request's policy trace, made on first use (only when the
// request is traced): which rules of which plan it was checked against
// and what each decided (tracePlanRules), and which guardrails the route,
// plan and client key attached (traceAttachments).
func (r *request) policy() *debug.Policy {
	if r.trace.policy == nil {
		r.trace.policy = &debug.Policy{}
		if r.client != nil {
			r.trace.policy.Plan = r.client.Plan
		}
	}
	return r.trace.policy
}

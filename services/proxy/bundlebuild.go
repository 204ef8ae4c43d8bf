package proxy

// A debug bundle built from what a finished request noted: its attempts,
// its route (every step, the order tried and why) and the holds of the keys
// it skipped.

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/redact"
)

// bundle builds the request's bundle (off the request path).
func (r *request) bundle(instance string, engine *hold.Engine) *debug.Bundle {
	t := &r.trace
	status := r.trace.status
	label := r.resolved
	if label == "" {
		label = modelUnknown
	}
	bd := &debug.Bundle{
		ModelLabel: label,
		V:          debug.SchemaVersion, RequestID: r.id, At: r.started.UTC(), Instance: instance, Endpoint: r.ep.path,
		Stream: r.stream, ClientType: r.use.clientType, Access: t.access, Limits: t.limits, Policy: t.policy, Guardrails: t.guards, Model: r.model,
		Attempts: make([]debug.Attempt, 0, len(t.log)), Status: status, ErrorCode: t.errCode,
		LatencyMS: ms(r.trace.ended), TTFTMS: ms(r.use.ttft), StreamCompleted: r.use.streamDone, Cancelled: r.use.cancelled || r.caller.gone.Load(),
		Request: digest(t.reqLen, t.reqSum, t.reqPrefix),
	}
	bd.TraceID, bd.TraceParent, bd.TraceState = r.tc.Bundle()
	streamCut := r.class == classStreamIncomplete
	bd.Outcome = debug.OutcomeOf(status, streamCut)
	if streamCut && bd.ErrorCode == "" {
		bd.ErrorCode = gwerror.StreamIncomplete
	}
	if class := r.outcomeClass(status); class != classOK {
		bd.Class = class
	}
	if bd.Access == "" {
		bd.Access = "allowed"
	}
	if r.client != nil {
		bd.Client, bd.Plan = r.client.ID, r.client.Plan
	}
	if t.respOK {
		d := digest(t.respLen, t.respSum, t.respPre)
		bd.Response = &d
	} else if t.resp != nil {
		d := debug.Digest{Bytes: t.respLen, SHA256: hex.EncodeToString(t.resp.Sum(nil)), PrefixBytes: min(t.respLen, debug.PrefixBytes),
			PrefixSHA256: hex.EncodeToString(t.respHead.Sum(nil))}
		bd.Response = &d
	}
	if r.by.provider != "" {
		bd.Provider, bd.ServedModel, bd.KeyID = r.by.provider, r.by.upModel, r.by.keyID
	} else if r.tally.last != nil {
		bd.Provider = r.tally.last.t.step.Provider.Name
	}
	if r.trace.rec != nil {
		tk := r.trace.rec.Tokens
		bd.Tokens = &debug.Tokens{Input: tk.Input, Output: tk.Output, CachedInput: tk.CachedInput, CacheWrite: tk.CacheWrite,
			Reasoning: tk.Reasoning, Estimated: r.trace.rec.TokensEstimated}
		bd.CostUSD = r.trace.rec.CostUSD
	}
	for i := range t.log {
		a := &t.log[i]
		da := debug.Attempt{N: i + 1, Provider: a.step.Provider.Name, Model: a.step.Upstream, KeyID: a.key.ID,
			Fingerprint: a.key.Fingerprint(), StartMS: ms(a.start), DurationMS: ms(a.dur), TTFTMS: ms(a.ttft),
			Status: a.status, Action: a.action, BackoffMS: ms(a.backoff), Probe: a.probe, Soft: a.soft}
		if a.span.IsValid() {
			da.SpanID = a.span.String()
		}
		if a.failed {
			da.Class = a.class.String()
			da.Error = providerError(a)
		}
		if i == len(t.log)-1 && r.stream && !a.failed {
			da.StreamCompleted = r.use.streamDone
		}
		if i == len(t.log)-1 && status != 200 && (a.action == failure.RetrySame.String() || a.action == failure.Rotate.String()) {
			da.Action = "stopped" // out of attempts or time: nothing came next
		}
		bd.Attempts = append(bd.Attempts, da)
	}
	if r.sel.route != nil {
		bd.Route = r.routeTrace(engine)
	}
	return bd
}

// routeTrace is the bundle's route: every step, the order the request
// tried them, why the others were not, and the keys it skipped as held.
func (r *request) routeTrace(engine *hold.Engine) *debug.Route {
	rte := r.sel.route
	rt := &debug.Route{Name: rte.Name, Kind: rte.Kind, Strategy: rte.Policy.Strategy.String(), Needs: r.sel.req.Needs.Names(),
		Region: r.sel.req.Region, RegionRequired: r.sel.req.RegionRequired, Steps: make([]debug.Step, len(rte.Steps))}
	for i := range rte.Steps {
		st := &rte.Steps[i]
		ds := debug.Step{Step: i, Reason: r.sel.cur.Reason(i).String()}
		if st.Provider == nil {
			ds.Target = "-/" + st.Model
		} else {
			ds.Target = st.Provider.Name + "/" + st.Model
		}
		rt.Steps[i] = ds
	}
	for n, i := range r.sel.cur.Order() {
		ds := &rt.Steps[i]
		ds.Tried, ds.Reason = n+1, ""
		st := &rte.Steps[i]
		tried := false
		for _, k := range st.Provider.Keys {
			if r.triedKey(k) {
				tried = true
				continue
			}
			for _, h := range engine.Covering(st.Provider.Name, k.HoldKey(), st.Model) {
				if h.State != hold.StateReleased {
					ds.Held = append(ds.Held, debug.HeldKey{KeyID: k.ID, HoldID: h.ID, Class: h.Class.String()})
					break
				}
			}
		}
		for _, rf := range r.sel.room.Refusals {
			if rf.Provider == st.Provider && rf.Model == st.Model && !skippedFor(ds.Headroom, rf.Key.ID) {
				hk := debug.HeadroomKey{KeyID: rf.Key.ID}
				if rf.Reset != 0 {
					hk.Reset = time.Unix(0, rf.Reset).UTC()
				}
				ds.Headroom = append(ds.Headroom, hk)
			}
		}
		switch {
		case tried:
		case len(ds.Headroom) > 0:
			ds.Reason = "headroom"
		case len(ds.Held) > 0:
			ds.Reason = "held"
		}
	}
	return rt
}

// skippedFor reports whether a step's headroom refusals name key id
// already (a request that waited for a reset walks again).
func skippedFor(hs []debug.HeadroomKey, id string) bool {
	for _, h := range hs {
		if h.KeyID == id {
			return true
		}
	}
	return false
}

// providerError is what a bundle keeps of an attempt's error: the
// provider's code and type, and its message (else the classifier's
// reason), masked by value for the provider's secrets and by shape for
// anything credential-like, and bounded.
func providerError(a *attemptRec) *debug.ProviderError {
	code, typ, msg := failure.Describe(a.body)
	if code == "" {
		code = a.code
	}
	if msg == "" {
		msg = a.reason
	}
	msg = string(redact.Text([]byte(msg), providerSecrets(a.step.Provider)...))
	if len(msg) > maxErrorMessage {
		msg = msg[:maxErrorMessage] + "..."
	}
	return &debug.ProviderError{Code: code, Type: typ, Message: msg}
}

// triedKey reports whether an attempt of the request went to k.
func (r *request) triedKey(k *route.Key) bool {
	for i := range r.trace.log {
		if r.trace.log[i].key == k {
			return true
		}
	}
	return false
}

func digest(n int, sum, prefix [sha256.Size]byte) debug.Digest {
	return debug.Digest{Bytes: n, SHA256: hex.EncodeToString(sum[:]), PrefixBytes: min(n, debug.PrefixBytes),
		PrefixSHA256: hex.EncodeToString(prefix[:])}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

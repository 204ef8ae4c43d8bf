// Package hold is Switchyard's hold engine: which targets are out of
// rotation, for how long, who re-checks them, and how they come back (the
// README's architecture section walks one hold through it by function
// name).
//
// # Pieces
//
// NewEngine(EngineOptions{Store, Emitter, Instance, Clock, Log, Policy,
// Rand, Fingerprint}) builds an Engine; Run(ctx) starts its owned
// goroutines (store watcher, writer, lease taker; a one-second sweep on the
// Clock) and returns when ctx ends, after draining queued writes for up to
// DrainTimeout. The proxy asks it on its request path:
//
//   - Admit(provider, key, model) reads a lock-free index of the local
//     table (index.go: a hash table of scopes whose bucket chains are
//     replaced copy-on-write under the engine lock, so a change costs the
//     same with 100 or 100,000 holds): no lock, no I/O, no allocation
//     (BenchmarkAdmit). It looks at the four scopes covering the target
//     (provider, provider+model, key, key+model) and answers Deny (held;
//     due but its probe is not ours; probe out elsewhere), Deferred
//     (ramping back and not picked by the ramp: used only when nothing
//     else admits, so the ramp never refuses a request only it can
//     serve), AdmitProbe (this instance holds the probe lease and this is
//     the lease's one probe: one attempt, no retry, report with
//     probe=true) or Admit.
//   - Report(provider, key, model, probe, outcome) never blocks: a failure
//     whose class holds (failure.Class.Meaning: rate_limit,
//     credential_rejected, quota_exhausted, model_not_accessible,
//     model_retired, region_blocked) holds ScopeFor(result, target) in
//     the local table at once and queues the store write (key or
//     key+model; provider scopes for keyless providers, reported with key
//     id ""). transient failures feed the circuit breaker only;
//     request_rejected, unrecognised and cancelled attempts never hold.
//
// Store is the fleet's shared record keeper (holdkv on NATS KV in
// production; MemStore, with identical semantics, in tests). FakeClock
// drives time in tests.
//
// # Ladder
//
// A new hold waits base * 2^rung, capped at the class's ceiling, then
// varied by ±jitter (default 10 %) so that a fleet does not re-check in
// step. Defaults: rate_limit 5s/5m, credential_rejected 5m/24h,
// quota_exhausted 10m/24h, model_not_accessible 10m/24h, model_retired
// 1h/7d, region_blocked 10m/24h, breaker trips 30s/5m. A wait the provider
// stated (Result.HasWait) is used as given with a floor (1 s); a trip_on
// rule's HoldTTL is used as given (either way the record says
// wait_stated, and no early probe cuts the wait short). A failure of the
// same class while a released target is still ramping climbs one rung. The
// rung stops where the wait reaches the ceiling.
//
// # Lifecycle and who writes what
//
//	held(r, until) --now >= until--> due --one lease (CAS)--> probing
//	probing --serves-->             released (ramp; record expires at RampUntil)
//	probing --serves, a trip hold short of success_threshold--> held(r, now), probe_successes+1
//	probing --same class-->         held(r+1) (capped where the wait reaches the ceiling)
//	probing --transient (5xx, net)-> held(r)
//	probing early (leased before due) --same class or transient--> held(r), its due time unchanged
//	probing --other failure-->      released ("settled"), the new failure held on its own scope
//	probing --cancelled (caller gone, deadline passed)--> held(r), its due time unchanged (the lease given back: due at once unless it was leased early, a soft pass)
//	any --Release / ReleaseKey / CredentialChanged--> released (fresh ramp)
//
// Every write is create-if-absent or compare-and-set on the record's
// revision, done by the writer goroutine of the instance that saw the
// transition:
//
//   - a new hold: Store.Create; the loser of a race (ErrExists) adopts the
//     stored record (no second record, no overwrite); a released record
//     that fails again is escalated by CAS on its revision;
//   - the probe lease: when Admit finds a due hold (or a lapsed lease) it
//     asks the lease taker, which calls TryProbe: a CAS to State probing
//     with Probe{Owner, Started, LeaseUntil} (lease default 30 s). Only the
//     owner's Admit hands out AdmitProbe, once per lease (an atomic token
//     in the local entry); everyone else keeps denying. A lease that lapses
//     unused can be taken again by anyone, so the probe must answer within
//     it (ProbeLeaseLeft: the proxy ends a probe's attempt there; a
//     probe's outcome reported after another instance took the lease is
//     dropped);
//   - probe outcomes, releases and pins: CAS on the revision the local
//     table had; a lost CAS adopts what the store holds.
//
// The prober settles due holds itself with TryProbe(ctx, id) and
// ProbeResult(ctx, id, outcome). The admin service uses Holds(),
// Release(ctx, id, source), ReleaseKey(ctx, provider, key, source),
// Pin(ctx, scope, until, reason) (an operator drain: Pinned, never
// probed; at until it ends by itself, released by a compare-and-set with
// one release event of outcome "expired") and BreakerStates(); a config reload that changes a key's
// secret calls CredentialChanged(ctx, provider, key).
//
// # Store unavailable
//
// A hold applies locally before it is written, so a request is never
// failed or slowed by the store. Failed writes stay queued (one intent per
// record, the latest state wins, events add up) and are retried with
// backoff (100 ms to 5 s); when the store answers, creates and CASes
// proceed as above. A hold that falls due while the store is down is
// probed by this instance alone (a local lease); its outcome is written
// later. Nothing writes the local lease itself: a record the store brings
// for the hold (another instance's release, the hold's own queued write,
// a deletion) replaces it, and when it lapses unused the record it stood
// over is leased again (in the store once the store answers).
//
// # Ramp
//
// A released target is admitted with probability start_share (0.1)
// growing linearly to 1 over ramp.duration (60 s) (otherwise Deferred: the
// proxy takes another key when one admits, this one when none does), using Rand (default
// math/rand/v2, no allocation). The released record is stored with a TTL
// of the ramp's length and expires by itself; the local table also drops
// it when the ramp is over.
//
// # Circuit breaker
//
// Per provider (or per provider+model with breaker.scope model), a
// sony/gobreaker/v2 breaker counts consecutive transient failures whose
// status matches breaker.failure_on_statuses (default 5xx and 408;
// transport errors and local timeouts, Status 0, always count). Attempts
// reported with Outcome.Retrying (the proxy retries the same target) are
// not counted, so one exhausted retry sequence counts once; cancellations
// never count; successes reset the count. The count is the fleet's: what
// a breaker counts goes out as a Tally (EngineOptions.Tallies; a success
// only when it reset a count) and every engine applies the others'
// (ApplyTally), so consecutive failures spread over many processes trip it
// at the threshold. At consecutive_failures
// (default 5) it trips: the trip becomes a hold of the provider (or
// provider+model), class transient, source breaker, cooldown 30 s, then one
// probe like any hold; a failing probe doubles the cooldown up to
// max_cooldown. With breaker.success_threshold N above 1 (default 1) the
// trip hold is released by the Nth consecutive successful probe only: each
// earlier success keeps it held, counted in Record.ProbeSuccesses, and due
// again at once (probe event outcome counted), so the next probe, the
// prober's or a caller's, re-checks it; a failed probe resets the count
// and climbs the ladder. The hold's lifecycle replaces gobreaker's half-open timer:
// when the hold is released, the breaker starts over closed. A trip that
// finds its scope already held (an operator's pin, a keyless provider's
// rate-limit hold of the provider scope) records nothing; the breaker
// starts over closed when that hold ends, whatever its class.
// BreakerStates reports closed, open (the trip hold waits) or half-open
// (due, or its probe is out).
//
// # Events
//
// Only the instance whose write won emits, so each transition is published
// once fleet-wide: hold (a new hold; breaker trips also emit trip), probe
// with Outcome released, escalated, same_rung, settled or counted, and release with
// Outcome probe, admin or credential (the Release source).
//
// # Configuration
//
// PolicyFromConfig builds the Policy from config.Config: engine defaults,
// then the global resilience section, then each providers[].resilience
// (zero or unset: inherit). Keys: resilience.ladder.<class>.base/.ceiling,
// stated_wait_floor, jitter, ramp.start_share, ramp.duration, probe.lease,
// breaker.{enabled, scope, consecutive_failures, cooldown, max_cooldown,
// failure_on_statuses, success_threshold}, all_held_policy (for the proxy: fail_fast or
// try_soft, read per provider; Engine.AdmitSoft lets a target held only
// by soft holds take one request at a time fleet-wide, as an early probe
// of those holds, at most once per EarlyProbeInterval after any probe:
// the larger of 1 s and a tenth of the hold's ladder wait on its rung.
// Every lease's compare-and-set writes the record's early_probe_after, so
// the interval is the fleet's. A hold whose wait was stated takes no early probe; a
// failed early probe leaves the rung and the due time alone, so early
// probes never climb the ladder faster than due probes; an early lease
// whose request sent nothing (Outcome.Unsent) is given back with the
// interval as it was).
// trip_on rules are compiled by config.Load; Config.Classifier applies
// them. See configs/README.md.
package hold

// Package quota enforces the plans' limits (plans.<name> in the
// configuration) for the whole fleet of proxies: requests and tokens per
// minute, concurrent requests, and budgets in USD per UTC day, ISO week and
// calendar month.
//
// # How it works
//
// Each process counts what its callers consume, per client, in memory:
// requests and tokens per minute window (minute index = unix seconds / 60),
// spend per day, week (Monday 00:00 UTC) and month, and requests in flight.
// Every interval (metering.limits_interval) the report loop writes this
// instance's totals that changed to the switchyard_limits bucket
// (bus.BucketLimits), one key per client, counter, window and instance.
// Every process watches the bucket (package kvwatch) and keeps the other
// instances' latest totals in memory. The fleet's consumption is this
// process's own totals, up to the moment, plus the others' reported ones.
//
// Admission (Limiter.Admit) reads memory only: no I/O, no allocation when
// admitted, well under a microsecond (BenchmarkAdmitDone). A request of
// client c under limits L with an estimated cost is refused with
//
//   - budget_exhausted when, for a period with a budget, an exhausted key
//     is recorded or the spend reached the budget (Retry-After: until the
//     period ends);
//   - budget_insufficient when the budget is not exhausted but spend +
//     estimate exceeds it (Retry-After: until the period ends; a smaller
//     request may pass now);
//   - rate_limited when the sliding requests of the last minute reached
//     L.RequestsPerMinute, or the sliding tokens L.TokensPerMinute. The
//     sliding estimate is the current minute's total plus the previous
//     minute's total times the part of the current minute still to come
//     (Retry-After: until the estimate falls below the limit if nothing
//     more is consumed);
//   - concurrency_limited when the fleet's requests in flight reached
//     L.ConcurrentRequests (Retry-After: 1 s).
//
// Admitted, a request counts one request and one in flight; Limiter.Done
// releases the slot and counts its tokens and cost when it ends.
//
// A limit holds for the fleet with a bounded overshoot: each process sees
// the others' consumption at most one interval plus the propagation delay
// (well under a millisecond) late, so the fleet may exceed a limit by what
// it consumes in that time. Tokens and cost count when a request ends, so
// tokens per minute and budgets may in addition be exceeded by the
// requests in flight (a budget check compares the estimated cost of the
// request at hand, not of those already running).
//
// # Budget exhaustion and reset
//
// When a process sees a client's spend in a period reach the budget, it
// creates the key <client>.exhausted.<period id>. Creation fails when the
// key exists, so exactly one process of the fleet records it; that one
// calls Options.OnExhausted (to publish an event) once its watcher has
// applied the key. Every process that
// applies the key refuses the client's requests for the period at once,
// even before its own sums agree.
//
// Limiter.ResetBudget writes the key <client>.reset holding, per current
// period id, the fleet's spend at the moment of the reset (the baseline)
// and who reset it. Every process subtracts the baseline of the current
// periods from the client's spend as soon as its watcher applies the key
// (milliseconds), and ignores exhausted keys written before it: an
// exhausted key carries the revision of the reset its writer knew
// (reset_revision), and one older than the client's latest reset is
// stale (and OnExhausted is not called for it). ResetBudget also deletes
// the exhausted keys of the current periods. An exhausted key that is
// stale is replaced with a compare-and-set write when the budget is
// exhausted again.
//
// The baseline is the resetting process's view: spend other processes
// had not reported yet (at most one interval's) counts after the reset.
//
// # Without NATS
//
// A Limiter starts unbound (New): it admits and counts with its own counts
// only. Bind gives it the bucket; Run then watches it and reports. While
// NATS is unreachable, Admit goes on deciding from memory (this process's
// counts and the others' last reports); the other instances' in-flight
// counts are forgotten once their keys must have expired (a live
// instance renews its key every half TTL), so a proxy that died never
// holds a client's slots for longer than the TTL. Reports resume when
// NATS is back.
//
// # The bucket: keys and values (a public contract)
//
// The bucket is switchyard_limits (created by bus.Setup: history 1,
// per-key TTLs, limit marker TTL 1 h). Client ids and instance ids are
// single key tokens of [A-Za-z0-9_-] (instance ids are made so with
// SanitizeInstance: a host name's dots become '_'). Every value is JSON
// with the schema version "v" (SchemaVersion, 1); readers skip other
// versions. Every key has a per-key TTL (the Nats-TTL header of its last
// write), so the bucket cleans itself.
//
//	key                                  value                        TTL after last write
//	<client>.req.m<minute>.<instance>    {"v":1,"n":<requests>}       3 min (MinuteTTL)
//	<client>.tok.m<minute>.<instance>    {"v":1,"n":<tokens>}         3 min
//	<client>.usd.d<YYYYMMDD>.<instance>  {"v":1,"usd":<spend>}        until the day ends + 10 min (PeriodMargin)
//	<client>.usd.w<YYYY>W<ww>.<instance> {"v":1,"usd":<spend>}        until the ISO week ends + 10 min
//	<client>.usd.m<YYYYMM>.<instance>    {"v":1,"usd":<spend>}        until the month ends + 10 min
//	<client>.inflight.<instance>         {"v":1,"n":<in flight>,      max(2 s, 8 intervals) (MinInflightTTL)
//	                                      "ttl_s":<key TTL, s>}
//	<client>.exhausted.<period id>       Exhaustion                   until the period ends + 10 min
//	<client>.reset                       ResetRecord                  until the last current period ends + 10 min
//
// <minute> is unix seconds / 60 (decimal); the period ids are the UTC
// day (d20250115), the ISO week with its ISO year (w2025W03) and the month
// (m202501). A counter value is the instance's total for the whole window,
// not an increment: the fleet's total of a window is the sum over the
// instances' keys. Spend is in USD (the price table's currency), as a JSON
// number. An instance writes a counter key only when its total changed
// since its last write; it renews its in-flight key while the count is
// above 0, every half TTL, and writes 0 when the last request ends (the
// key then expires). Readers forget an in-flight count not renewed within
// its ttl_s, even if no expiry reached them.
//
// An exhausted key's value (Exhaustion):
//
//	{"v":1,"client":"team-a","plan":"pro","period":"day","period_id":"d20250115",
//	 "spend_usd":1.2,"budget_usd":1,"instance":"proxy-host2-9b03e7",
//	 "at":"2025-01-15T12:00:30Z","ends":"2025-01-16T00:00:00Z","reset_revision":0}
//
// A reset key's value (ResetRecord):
//
//	{"v":1,"client":"team-a","by":"alice","at":"2025-01-15T12:00:30Z",
//	 "baseline_usd":{"d20250115":1.2,"m202501":1.2,"w2025W03":1.2}}
//
// What an operator sees with two proxies, client team-a on a plan with a
// day budget of $1.00, $1.20 spent, one request in flight on the first
// proxy, after the budget was exhausted (TestNatsCLI checks this list):
//
//	$ nats kv ls switchyard_limits
//	team-a.exhausted.d20250115
//	team-a.inflight.proxy-host1-4f2a1c
//	team-a.req.m28949040.proxy-host1-4f2a1c
//	team-a.req.m28949040.proxy-host2-9b03e7
//	team-a.tok.m28949040.proxy-host1-4f2a1c
//	team-a.tok.m28949040.proxy-host2-9b03e7
//	team-a.usd.d20250115.proxy-host1-4f2a1c
//	team-a.usd.d20250115.proxy-host2-9b03e7
//	team-a.usd.m202501.proxy-host1-4f2a1c
//	team-a.usd.m202501.proxy-host2-9b03e7
//	team-a.usd.w2025W03.proxy-host1-4f2a1c
//	team-a.usd.w2025W03.proxy-host2-9b03e7
//	$ nats kv get switchyard_limits team-a.usd.d20250115.proxy-host1-4f2a1c --raw
//	{"v":1,"usd":0.6}
//
// After `ResetBudget(ctx, "team-a", "alice")` the exhausted key is gone
// and team-a.reset is listed instead.
//
// # Clocks
//
// Windows and periods follow Options.Now (the wall clock by default; tests
// move a fake one). The fleet's clocks should agree to within a second or
// so (NTP): minute and period ids are computed by each writer.
package planlimit

package admin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/shared/usage"
	"switchyard.dev/shared/usage/rollup"
)

// startRecorder runs a usage recorder as admin instance inst would, until
// the returned stop is called (stop waits for it to end); opts change it
// before it starts.
func (e *env) startRecorder(inst string, ctx context.Context, opts ...func(*recorder)) (*recorder, func()) {
	e.t.Helper()
	r := &recorder{log: slog.New(slog.DiscardHandler), inst: inst, nc: e.anc, flush: 20 * time.Millisecond,
		leaseTTL: 3 * time.Second, res: e.svc.rollupRes, resources: e.proxy.Resources}
	for _, o := range opts {
		o(r)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	stop := func() { cancel(); <-done }
	e.t.Cleanup(stop)
	return r, stop
}

// checkpoint reads the recorder's checkpoint.
func (e *env) checkpoint() rollup.Checkpoint {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ck, _, err := rollup.NewStore(nil, e.proxy.Resources().UsageRollups, nil).Checkpoint(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return ck
}

// rollupTotals sums the stored cells of resolution res whose bucket is
// still kept, and returns the time it judged that at: recount(recs, res,
// now) is then exactly what they should hold. now is taken after the
// read: a bucket kept at now was kept whenever its records were folded
// (before) and when it was read (its value lives at least until the
// bucket Expires, rollup's valueTTL); a bucket past its retention at now
// is left out whether or not the server has expired its value yet (NATS
// does so up to a second or so late). Comparing every stored value with a
// recount at a later time.Now() counted a record of a minute bucket that
// expired in between once more (or, with the TTL once rounded down to the
// second, once less).
func (e *env) rollupTotals(res rollup.Resolution) (rollup.Sums, time.Time) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st := rollup.NewStore(nil, e.proxy.Resources().UsageRollups, []rollup.Resolution{res})
	var values []*rollup.Value
	if err := st.ReadAll(ctx, 0, func(v *rollup.Value) { values = append(values, v) }); err != nil {
		e.t.Fatal(err)
	}
	now := time.Now()
	var sum rollup.Sums
	for _, v := range values {
		if !res.Kept(v.Start, now) {
			continue
		}
		for _, c := range v.Cells {
			sum.Merge(&c.Sums)
		}
	}
	return sum, now
}

// recount sums recs as the rollups of resolution res should at now: the
// records whose bucket is still kept.
func recount(recs []usage.Record, res rollup.Resolution, now time.Time) rollup.Sums {
	var sum rollup.Sums
	for i := range recs {
		if res.Kept(res.Start(recs[i].At), now) {
			sum.Add(&recs[i])
			for j := range recs[i].FailedAttempts {
				sum.AddFailed(&recs[i].FailedAttempts[j])
			}
		}
	}
	return sum
}

// sameRollups compares the rollups of every resolution with a recount of
// recs, exactly.
func (e *env) sameRollups(recs []usage.Record) {
	e.t.Helper()
	for _, res := range e.svc.rollupRes {
		got, now := e.rollupTotals(res)
		sameSums(e.t, res.Name, got, recount(recs, res, now))
	}
}

// sameSums compares every count of two sums exactly (costs are multiples
// of 1/1024 in these tests, so their float sums are exact in any order).
func sameSums(t *testing.T, what string, got, want rollup.Sums) {
	t.Helper()
	type counts struct {
		requests, errors, costUnknown, estimated, streams, incomplete, cancelled, attempts, failed int64
		tokens                                                                                     usage.Tokens
		cost, latencyN, ttftN                                                                      float64
	}
	of := func(s rollup.Sums) counts {
		c := counts{s.Requests, s.Errors, s.CostUnknown, s.TokensEstimated, s.Streams, s.StreamsIncomplete, s.Cancelled,
			s.Attempts, s.FailedAttempts, s.Tokens, s.CostUSD, 0, 0}
		if s.Latency != nil {
			c.latencyN = s.Latency.GetCount()
		}
		if s.TTFT != nil {
			c.ttftN = s.TTFT.GetCount()
		}
		return c
	}
	if g, w := of(got), of(want); g != w {
		t.Errorf("%s: rollups %+v, recount %+v", what, g, w)
	}
}

// usageBatch is n records over the last span, on three providers and
// four clients, some failed, some streamed, some without a cost, some
// served after two failed attempts on another provider (one cancelled).
func usageBatch(prefix string, n int, span time.Duration) []usage.Record {
	now := time.Now().UTC()
	providers := []string{"openai", "anthropic", "gemini"}
	recs := make([]usage.Record, n)
	for i := range recs {
		recs[i] = rec(fmt.Sprintf("%s%05d", prefix, i), now.Add(-span*time.Duration(i)/time.Duration(n)), func(r *usage.Record) {
			r.Provider, r.ClientID = providers[i%3], fmt.Sprintf("c%d", i%4)
			r.Model = fmt.Sprintf("m%d", i%5)
			r.CostUSD = cost(float64(i%7) / 1024)
			r.LatencyMS, r.Tokens.Input = float64(10+i%900), int64(i)
			if i%11 == 0 {
				r.CostUSD, r.Status, r.Class = nil, 429, "rate_limit"
				r.Guardrail, r.GuardrailName, r.GuardrailStage = "warn", "no-cards", "output"
				r.Cache = "miss"
			}
			if i%5 == 0 {
				r.Stream, r.StreamCompleted, r.TTFTMS = true, i%10 != 0, float64(1+i%50)
			}
			if i%13 == 12 {
				r.Cache, r.CacheSavedUSD = "hit", cost(float64(i%3)/512)
			}
			if i%7 == 6 {
				other := providers[(i+1)%3]
				r.Attempts = 3
				r.FailedAttempts = []usage.FailedAttempt{{Provider: other, Model: "m9", KeyID: "k", Class: "transient"},
					{Provider: other, Model: "m9", KeyID: "k", Class: "transient", Cancelled: true}}
			}
		})
	}
	return recs
}

// TestRecorderExactlyOnce: a recorder stopped in the middle of a flush
// (some values written, its checkpoint not) is followed by another admin
// instance that takes the lease and replays from the checkpoint; every
// resolution's totals then equal a recount of the raw records, exactly.
func TestRecorderExactlyOnce(t *testing.T) {
	e := startEnvWith(t, envOptions{noRecorder: true})
	first := usageBatch("a", 600, 72*time.Hour)
	e.publishUsage(first...)

	ctxA, cancelA := context.WithCancel(context.Background())
	a, stopA := e.startRecorder("admin-a", ctxA)
	e.waitRecorded()
	ck := e.checkpoint()

	// a second instance waits while a holds the lease
	b, stopB := e.startRecorder("admin-b", context.Background())
	if b.active.Load() || !a.active.Load() {
		t.Fatalf("active: a %v, b %v", a.active.Load(), b.active.Load())
	}

	// a dies in the middle of its next flush: its context ends once the
	// first value of the flush is written
	res := e.proxy.Resources()
	w, err := res.UsageRollups.WatchAll(context.Background(), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	cut := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var once sync.Once
		for u := range w.Updates() { // until Stop closes it
			if u != nil && u.Key() != rollup.CheckpointKey {
				once.Do(func() { cancelA(); close(cut) })
			}
		}
	}()
	defer func() { _ = w.Stop(); <-watched }()
	second := usageBatch("b", 900, 50*time.Hour)
	e.publishUsage(second...)
	<-cut
	stopA()
	if got := e.checkpoint(); got.Seq != ck.Seq {
		t.Logf("a wrote its checkpoint %d before it stopped (was %d): the cut came after the flush", got.Seq, ck.Seq)
	}

	// b takes over within the lease's TTL and replays
	e.waitRecorded()
	if !b.active.Load() {
		t.Fatal("b is not recording")
	}
	all := append(first, second...)
	e.sameRollups(all)
	// and so does a report over everything
	rep := e.usage("?from=-4d&group_by=provider")
	want := recount(all, e.svc.rollupRes[2], time.Now()) // day buckets, kept two years: no edge
	if rep.Totals.Requests != want.Requests || rep.RolledUp != want.Requests || rep.Truncated {
		t.Errorf("report: %d requests (%d rolled up), truncated %v; recount %d", rep.Totals.Requests, rep.RolledUp, rep.Truncated, want.Requests)
	}
	stopB()
}

// TestRollupsRetentionEdge: a minute bucket whose retention ends just
// after its records are folded: the rollups equal a recount exactly
// before, across and after the edge (the value lives until its bucket
// Expires, not half a second less; a bucket past its retention counts in
// neither, though the server drops its value a little later), and the
// value does go.
func TestRollupsRetentionEdge(t *testing.T) {
	e := startEnvWith(t, envOptions{noRecorder: true})
	now := time.Now().UTC()
	edge, kept := rec("edge", now.Add(-time.Hour)), rec("kept", now.Add(-time.Minute))
	// a retention that ends the edge record's minute bucket in 2 s
	def := e.svc.rollupRes[0]
	start := def.Start(edge.At)
	exp := now.Add(2 * time.Second)
	minute := rollup.Resolution{Name: def.Name, Width: def.Width, Keep: exp.Sub(start.Add(def.Width))}
	e.publishUsage(edge, kept)
	_, stop := e.startRecorder("admin-a", context.Background(), func(r *recorder) {
		r.res = append([]rollup.Resolution{minute}, e.svc.rollupRes[1:]...)
	})
	defer stop()
	e.waitRecorded()
	if time.Now().After(exp) { // still exact, but only after the edge
		t.Logf("the recorder took %s: past the edge before the first comparison", time.Since(now))
	}
	recs := []usage.Record{edge, kept}
	compared := 0
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		got, at := e.rollupTotals(minute)
		sameSums(t, fmt.Sprintf("minute, %s after the edge", at.Sub(exp)), got, recount(recs, minute, at))
		compared++
		if got.Requests != 1 {
			return fmt.Errorf("%d requests in the rollups", got.Requests)
		}
		// and the server has dropped the value
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		keys, err := e.proxy.Resources().UsageRollups.ListKeysFiltered(ctx, rollup.BucketPrefix(minute.Name, start)+">")
		if err != nil {
			return err
		}
		n := 0
		for range keys.Keys() {
			n++
		}
		if n > 0 {
			return fmt.Errorf("%d values of the bucket past its retention", n)
		}
		return nil
	})
	t.Logf("%d comparisons", compared)
}

// TestUsageReportTail: records the recorder has not folded yet are read
// from the stream, once, and a record folded but not yet checkpointed is
// not counted twice.
func TestUsageReportTail(t *testing.T) {
	e := startEnvWith(t, envOptions{noRecorder: true})
	recs := usageBatch("t", 90, time.Hour)
	e.publishUsage(recs[:60]...)
	_, stop := e.startRecorder("admin-a", context.Background())
	e.waitRecorded()
	stop()
	e.publishUsage(recs[60:]...)
	a := e.usage("?from=-2h")
	if a.Totals.Requests != 90 || a.RolledUp != 60 || a.Scanned != 30 || a.Truncated {
		t.Fatalf("%d requests, %d rolled up, %d scanned, truncated %v", a.Totals.Requests, a.RolledUp, a.Scanned, a.Truncated)
	}
}

// TestUsageCoveredFrom: the stream discarded its first records before
// any recorder read them: a report over a range from before says where
// its data starts, and that it covers part of the range.
func TestUsageCoveredFrom(t *testing.T) {
	e := startEnvWith(t, envOptions{noRecorder: true})
	now := time.Now().UTC()
	old := rec("old", now.Add(-2*time.Hour))
	e.publishUsage(old)
	newer := rec("new", now.Add(-30*time.Minute), func(r *usage.Record) { r.ClientID = "ci" })
	e.publishUsage(newer)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	// what metering.max_bytes does to the oldest records
	if err := e.proxy.Resources().Usage.Purge(ctx, jetstream.WithPurgeSequence(2)); err != nil {
		t.Fatal(err)
	}
	_, stop := e.startRecorder("admin-a", context.Background())
	defer stop()
	e.waitRecorded()
	a := e.usage("?from=-3h")
	if a.Totals.Requests != 1 || !a.CoveredFrom.Equal(newer.At) || !a.Truncated || a.TruncatedBy != "coverage" {
		t.Fatalf("%d requests, covered from %v (want %v), truncated %v by %q", a.Totals.Requests, a.CoveredFrom, newer.At, a.Truncated, a.TruncatedBy)
	}
	// a range after the first record is covered in full
	if a := e.usage("?from=-20m"); a.Truncated || !a.CoveredFrom.Equal(a.From) {
		t.Errorf("last 20 minutes: covered from %v, from %v, truncated %v", a.CoveredFrom, a.From, a.Truncated)
	}
}

// BenchmarkUsageRollups folds SWITCHYARD_BENCH_RECORDS records (200,000
// by default) published as the proxies publish them (100 a message, over
// the last 30 days, 3 providers, 20 clients, 10 models), then times a
// 30-day report grouped by client from the rollups:
//
//	SWITCHYARD_BENCH_RECORDS=1000000 go test -run '^$' -bench UsageRollups -benchtime 5x ./services/admin
func BenchmarkUsageRollups(b *testing.B) {
	n := 200_000
	if v := os.Getenv("SWITCHYARD_BENCH_RECORDS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer natsembed.Stop(ns)
	nc, js := testkit.ConnectNATS(b, ns.ClientURL())
	ctx := context.Background()
	res, err := bus.Setup(ctx, js, bus.SetupOptions{Storage: "memory", UsageMaxBytes: 8 << 30})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	providers := []string{"openai", "anthropic", "gemini"}
	const perMsg = 100
	var buf []byte
	for i := 0; i < n; i += perMsg {
		p, c := providers[(i/perMsg)%3], fmt.Sprintf("client-%d", (i/perMsg)%20)
		buf = buf[:0]
		for j := i; j < min(i+perMsg, n); j++ {
			r := rec(fmt.Sprintf("b%07d", j), now.Add(-time.Duration(float64(30*24*time.Hour)*float64(j)/float64(n))), func(r *usage.Record) {
				r.Provider, r.ClientID, r.Model = p, c, fmt.Sprintf("model-%d", j%10)
				r.LatencyMS = float64(20 + j%2000)
			})
			if j > i {
				buf = append(buf, '\n')
			}
			buf = r.AppendJSON(buf)
		}
		if _, err := js.PublishAsync(usage.Subject(p, c), append([]byte(nil), buf...)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		b.Fatal("publish did not complete")
	}
	info, err := res.Usage.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	rr := rollup.Resolutions(0, 0, 0)
	r := &recorder{log: slog.New(slog.DiscardHandler), inst: "bench", nc: nc, flush: time.Second, leaseTTL: 10 * time.Second,
		res: rr, resources: func() *bus.Resources { return res }}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); r.Run(rctx) }()
	for r.checkpoint.Load() < info.State.LastSeq {
		time.Sleep(10 * time.Millisecond) // a benchmark's wait, not a test's
	}
	fold := time.Since(start)
	cancel()
	<-done

	q, err := parseUsageQuery(map[string]string{"group_by": "client", "from": "-30d"}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	u := newUsageReader(0)
	st := rollup.NewStore(nil, res.UsageRollups, rr)
	st.Cache = rollup.NewCache(0) // as the admin's reports read them
	coldStart := time.Now()       // the first report decodes every value
	if _, err := u.read(ctx, res.Usage, st, q); err != nil {
		b.Fatal(err)
	}
	cold := time.Since(coldStart)
	b.ResetTimer()
	for b.Loop() {
		a, err := u.read(ctx, res.Usage, st, q)
		if err != nil {
			b.Fatal(err)
		}
		if a.Totals.Requests < int64(n)*99/100 || a.Scanned != 0 {
			b.Fatalf("%d requests of %d, %d scanned", a.Totals.Requests, n, a.Scanned)
		}
	}
	b.ReportMetric(float64(n)/fold.Seconds(), "records_folded/s")
	b.ReportMetric(fold.Seconds(), "fold_s")
	b.ReportMetric(float64(cold.Milliseconds()), "cold_report_ms")
}

// TestUsageReportCacheFollowsWrites: reports read the rollups through the
// service's cache of decoded values; a value the recorder rewrote since
// (a new revision) is read anew, so a report after more records counts
// them.
func TestUsageReportCacheFollowsWrites(t *testing.T) {
	e := startEnv(t, false)
	now := time.Now().UTC().Add(-2 * time.Minute)
	e.publishUsage(rec("c1", now), rec("c2", now))
	e.waitRecorded()
	if a := e.usage("?from=-1h"); a.Totals.Requests != 2 || a.RolledUp != 2 {
		t.Fatalf("first report: %d requests, %d rolled up", a.Totals.Requests, a.RolledUp)
	}
	// the recording instance says so, and how far it is
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		if err := hasMetricAbove(e.base+"/metrics", "switchyard_usage_recorder_active", 0); err != nil {
			return err
		}
		return hasMetricAbove(e.base+"/metrics", "switchyard_usage_recorder_checkpoint", 0)
	})
	cached := e.svc.rollupCache.Len()
	if cached == 0 {
		t.Fatal("the report cached no value")
	}
	if a := e.usage("?from=-1h"); a.Totals.Requests != 2 {
		t.Fatalf("the same report from the cache: %d requests", a.Totals.Requests)
	}
	e.publishUsage(rec("c3", now), rec("c4", now), rec("c5", now))
	e.waitRecorded()
	if a := e.usage("?from=-1h"); a.Totals.Requests != 5 || a.RolledUp != 5 {
		t.Fatalf("after 3 more records: %d requests, %d rolled up (a stale cached value?)", a.Totals.Requests, a.RolledUp)
	}
}

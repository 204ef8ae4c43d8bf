package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/shared/usage"
	"switchyard.dev/shared/usage/rollup"
)

// publishUsage publishes records to SWITCHYARD_USAGE as a proxy does: a
// batch's records that share a subject (usage.Subject) in one message, one
// JSON record per line, the message id naming the first record and the
// count; it waits for each message to be stored.
func (e *env) publishUsage(recs ...usage.Record) {
	e.t.Helper()
	js, err := jetstream.New(e.pnc)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	type msg struct {
		subject, first string
		data           []byte
		n              int
	}
	var msgs []*msg
	bySubject := map[string]*msg{}
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			e.t.Fatal(err)
		}
		subject := usage.Subject(r.Provider, r.ClientID)
		m := bySubject[subject]
		if m == nil {
			m = &msg{subject: subject, first: r.RequestID}
			bySubject[subject] = m
			msgs = append(msgs, m)
		} else {
			m.data = append(m.data, '\n')
		}
		m.data = append(m.data, b...)
		m.n++
	}
	for _, m := range msgs {
		if _, err := js.Publish(ctx, m.subject, m.data, jetstream.WithMsgID(fmt.Sprintf("%s+%d", m.first, m.n))); err != nil {
			e.t.Fatalf("publish usage records on %s: %v", m.subject, err)
		}
	}
}

// publishRaw publishes data on subject to the usage stream.
func (e *env) publishRaw(subject string, data []byte) {
	e.t.Helper()
	js, _ := jetstream.New(e.pnc)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := js.Publish(ctx, subject, data); err != nil {
		e.t.Fatal(err)
	}
}

// waitRecorded waits until the usage rollups hold every message of the
// usage stream (the recorder's checkpoint is the stream's last sequence).
func (e *env) waitRecorded() {
	e.t.Helper()
	res := e.proxy.Resources()
	testkit.CheckFor(e.t, testTimeout, 10*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		info, err := res.Usage.Info(ctx)
		if err != nil {
			return err
		}
		ck, _, err := rollup.NewStore(nil, res.UsageRollups, nil).Checkpoint(ctx)
		if err != nil {
			return err
		}
		if ck.Seq != info.State.LastSeq {
			return fmt.Errorf("checkpoint %d, stream at %d", ck.Seq, info.State.LastSeq)
		}
		return nil
	})
}

// within1 reports whether got is within the sketches' relative accuracy (1 %)
// of want, after rounding to 0.01.
func within1(got, want float64) bool {
	return math.Abs(got-want) <= want*rollup.RelativeAccuracy+0.01
}

// nearPcts compares p50 and p95 with within1.
func nearPcts(got adminapi.Percentiles, p50, p95 float64) bool {
	return within1(got.P50, p50) && within1(got.P95, p95)
}

// usage asks GET /admin/usage with a read token and decodes the
// answer.
func (e *env) usage(query string) adminapi.UsageReport {
	e.t.Helper()
	r := e.do("GET", "/admin/usage"+query, readToken, nil)
	r.expect(e.t, 200, "")
	var a adminapi.UsageReport
	if err := json.Unmarshal(r.raw, &a); err != nil {
		e.t.Fatalf("decode %s: %v", r.raw, err)
	}
	return a
}

func cost(v float64) *float64 { return &v }

// rec is a successful non-stream record of client app on openai/gpt-4o
// (key primary), changed by opts.
func rec(id string, at time.Time, opts ...func(*usage.Record)) usage.Record {
	r := usage.Record{
		V: usage.SchemaVersion, RequestID: id, At: at, ClientID: "app", Plan: "pro", ClientType: "openai-python",
		Endpoint: "/v1/chat/completions", ModelRequested: "gpt-4o", Provider: "openai", ProviderType: "openai",
		Model: "gpt-4o", KeyID: "primary", Attempts: 1, Status: 200,
		Tokens: usage.Tokens{Input: 100, Output: 50}, CostUSD: cost(0.001), LatencyMS: 100,
	}
	for _, o := range opts {
		o(&r)
	}
	return r
}

// findGroup returns the group of a whose key has the values kv (pairs).
func findGroup(t *testing.T, a adminapi.UsageReport, kv ...string) adminapi.UsageGroup {
	t.Helper()
	for _, g := range a.Groups {
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			ok = ok && g.Key[kv[i]] == kv[i+1]
		}
		if ok {
			return g
		}
	}
	t.Fatalf("no group %v in %+v", kv, a.Groups)
	return adminapi.UsageGroup{}
}

func TestUsageReport(t *testing.T) {
	e := startEnv(t, false)
	// The records are folded into the rollups by the service's recorder
	// (waitRecorded) and counted by their own time ("at").
	base := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	batch := []usage.Record{
		rec("r1", base.Add(10*time.Minute), func(r *usage.Record) { r.Tokens.CachedInput = 20 }),
		rec("r2", base.Add(20*time.Minute), func(r *usage.Record) {
			r.KeyID, r.CostUSD, r.LatencyMS = "secondary", cost(0.002), 200
			r.Stream, r.StreamCompleted, r.TTFTMS = true, true, 50
			r.Tokens = usage.Tokens{Input: 10, Output: 5, Reasoning: 7}
		}),
		rec("r3", base.Add(70*time.Minute), func(r *usage.Record) {
			r.Status, r.Class, r.CostUSD, r.LatencyMS, r.Attempts = 429, "rate_limit", nil, 300, 3
			r.Tokens = usage.Tokens{}
		}),
		rec("r4", base.Add(80*time.Minute), func(r *usage.Record) {
			r.ClientID, r.Plan, r.ClientType, r.Endpoint = "ci", "", "claude-code", "/v1/messages"
			r.Provider, r.ProviderType, r.Model, r.ModelRequested, r.KeyID = "anthropic", "anthropic", "claude-x", "claude-x", "b1"
			r.CostUSD, r.LatencyMS = cost(0.01), 400
			r.Stream, r.StreamCompleted, r.TTFTMS, r.Cancelled, r.TokensEstimated = true, false, 80, true, true
			r.Tokens = usage.Tokens{Input: 1000, Output: 200, CacheWrite: 300}
		}),
		rec("r5", base.Add(130*time.Minute), func(r *usage.Record) {
			r.ClientID, r.Plan, r.ClientType, r.Endpoint = "ci", "", "claude-code", "/v1/messages"
			r.Provider, r.ProviderType, r.Model, r.ModelRequested, r.KeyID = "anthropic", "anthropic", "claude-x", "claude-x", "b1"
			r.Status, r.Class, r.CostUSD, r.LatencyMS = 500, "transient", nil, 500
			r.Tokens = usage.Tokens{}
		}),
		// outside the default range (24 h) and of every query below
		rec("old", base.Add(-30*time.Hour), func(r *usage.Record) { r.CostUSD = cost(1) }),
	}
	e.publishUsage(batch...)
	// the same batch again (a proxy publishing it again after a lost
	// acknowledgement) within the duplicate window: stored once
	e.publishUsage(batch...)
	e.waitRecorded()
	from := url.QueryEscape(base.Format(time.RFC3339))

	t.Run("by provider", func(t *testing.T) {
		a := e.usage("?group_by=provider&from=" + from)
		if a.Scanned != 0 || a.RolledUp != 5 || a.Matched != 5 || a.Truncated || len(a.Groups) != 2 || a.Interval != "none" ||
			!a.CoveredFrom.Equal(base) || a.UnreadMessages != 0 {
			t.Fatalf("scanned %d rolled up %d matched %d truncated %v interval %q groups %d covered from %v unread %d",
				a.Scanned, a.RolledUp, a.Matched, a.Truncated, a.Interval, len(a.Groups), a.CoveredFrom, a.UnreadMessages)
		}
		// cost first: anthropic 0.01 before openai 0.003
		if a.Groups[0].Key["provider"] != "anthropic" || a.Groups[1].Key["provider"] != "openai" {
			t.Fatalf("order %v, %v", a.Groups[0].Key, a.Groups[1].Key)
		}
		o, an := a.Groups[1], a.Groups[0]
		if o.Requests != 3 || o.Errors != 1 || o.ErrorRate != 0.3333 || o.CostUSD == nil || *o.CostUSD != 0.003 || o.CostUnknownRequests != 1 {
			t.Errorf("openai %+v", o)
		}
		if o.Tokens.Input != 110 || o.Tokens.Output != 55 || o.Tokens.CachedInput != 20 || o.Tokens.Reasoning != 7 || o.Tokens.Total != 192 {
			t.Errorf("openai tokens %+v", o.Tokens)
		}
		if !nearPcts(o.LatencyMS, 200, 200) || o.TTFTMS == nil || !nearPcts(*o.TTFTMS, 50, 50) {
			t.Errorf("openai latency %+v ttft %+v", o.LatencyMS, o.TTFTMS)
		}
		if o.Streams != 1 || o.StreamsIncomplete != 0 || o.Cancelled != 0 || o.TokensEstimatedRequests != 0 {
			t.Errorf("openai streams %+v", o)
		}
		if an.Requests != 2 || an.Errors != 1 || *an.CostUSD != 0.01 || an.CostUnknownRequests != 1 || an.Tokens.CacheWrite != 300 ||
			an.Streams != 1 || an.StreamsIncomplete != 1 || an.Cancelled != 1 || an.TokensEstimatedRequests != 1 ||
			an.TTFTMS == nil || !within1(an.TTFTMS.P50, 80) || !nearPcts(an.LatencyMS, 400, 400) {
			t.Errorf("anthropic %+v", an)
		}
		if a.Totals.Requests != 5 || a.Totals.Errors != 2 || *a.Totals.CostUSD != 0.013 || a.Totals.CostUnknownRequests != 2 || a.Totals.Key != nil {
			t.Errorf("totals %+v", a.Totals)
		}
	})

	t.Run("hour buckets", func(t *testing.T) {
		a := e.usage("?interval=hour&from=" + from)
		want := []int64{2, 2, 1}
		if len(a.Groups) != len(want) {
			t.Fatalf("%d groups: %+v", len(a.Groups), a.Groups)
		}
		for i, g := range a.Groups {
			if g.Bucket == nil || !g.Bucket.Equal(base.Add(time.Duration(i)*time.Hour)) || g.Requests != want[i] {
				t.Errorf("bucket %d: %v %d requests, want %v %d", i, g.Bucket, g.Requests, base.Add(time.Duration(i)*time.Hour), want[i])
			}
		}
		// second bucket: r3 (openai, cost unknown) and r4 (anthropic)
		if g := a.Groups[1]; g.Errors != 1 || *g.CostUSD != 0.01 || g.CostUnknownRequests != 1 {
			t.Errorf("second bucket %+v", g)
		}
		// a bucket of unknown costs only: cost_usd is null, not 0
		if g := a.Groups[2]; g.CostUSD != nil || g.CostUnknownRequests != 1 {
			t.Errorf("third bucket: cost %v, unknown %d", g.CostUSD, g.CostUnknownRequests)
		}
		// day buckets in UTC, grouped by provider and model inside
		d := e.usage("?interval=day&group_by=provider,model&from=" + from)
		for _, g := range d.Groups {
			if g.Bucket == nil || g.Bucket.Hour() != 0 || g.Bucket.Location() != time.UTC {
				t.Errorf("day bucket %v", g.Bucket)
			}
		}
		// minute buckets over the last 20 minutes: none of these records (r5
		// is at least 50 minutes old)
		if m := e.usage("?interval=minute&from=-20m"); len(m.Groups) != 0 || m.Totals.Requests != 0 || m.Interval != "minute" {
			t.Errorf("last 20 minutes: %+v", m)
		}
	})

	t.Run("filters", func(t *testing.T) {
		for _, tt := range []struct {
			name     string
			query    string
			requests int64
		}{
			{name: "client", query: "client=app", requests: 3},
			{name: "provider", query: "provider=anthropic", requests: 2},
			{name: "provider and client", query: "provider=anthropic,openai&client=ci", requests: 2},
			{name: "repeated parameter", query: "client=ci&client=app", requests: 5},
			{name: "repeated value", query: "provider=anthropic,anthropic", requests: 2},
			{name: "repeated parameter and value", query: "client=app&client=app&provider=openai,openai", requests: 3},
			{name: "unknown client", query: "client=nobody", requests: 0},
			{name: "model", query: "model=claude-x", requests: 2},
			{name: "model and client", query: "model=gpt-4o&client=app", requests: 3},
		} {
			t.Run(tt.name, func(t *testing.T) {
				a := e.usage("?" + tt.query + "&from=" + from)
				if a.Totals.Requests != tt.requests || a.RolledUp != tt.requests {
					t.Errorf("requests %d (rolled up %d), want %d", a.Totals.Requests, a.RolledUp, tt.requests)
				}
			})
		}
	})

	t.Run("dimensions", func(t *testing.T) {
		a := e.usage("?group_by=key&from=" + from)
		for kv, n := range map[string]int64{"openai/primary": 2, "openai/secondary": 1, "anthropic/b1": 2} {
			if g := findGroup(t, a, "key", kv); g.Requests != n {
				t.Errorf("key %s: %d requests, want %d", kv, g.Requests, n)
			}
		}
		a = e.usage("?group_by=class,status&from=" + from)
		if g := findGroup(t, a, "class", "rate_limit", "status", "429"); g.Requests != 1 || g.CostUSD != nil || g.CostUnknownRequests != 1 {
			t.Errorf("rate_limit: %+v", g)
		}
		if g := findGroup(t, a, "class", "", "status", "200"); g.Requests != 3 {
			t.Errorf("successes: %+v", g)
		}
		a = e.usage("?group_by=client,plan,client_type,endpoint&from=" + from)
		if g := findGroup(t, a, "client", "ci", "plan", "", "client_type", "claude-code", "endpoint", "/v1/messages"); g.Requests != 2 {
			t.Errorf("ci: %+v", g)
		}
		if strings.Join(a.GroupBy, ",") != "client,plan,client_type,endpoint" {
			t.Errorf("group_by echoed %v", a.GroupBy)
		}
	})

	t.Run("limit", func(t *testing.T) {
		a := e.usage("?group_by=key&limit=1&from=" + from)
		if len(a.Groups) != 1 || a.GroupsOmitted != 2 || a.Groups[0].Key["key"] != "anthropic/b1" || a.Limit != 1 {
			t.Errorf("limit 1: %d groups, %d omitted: %+v", len(a.Groups), a.GroupsOmitted, a.Groups)
		}
		// per time bucket
		a = e.usage("?group_by=provider&interval=hour&limit=1&from=" + from)
		if len(a.Groups) != 3 || a.GroupsOmitted != 1 {
			t.Errorf("limit 1 per bucket: %d groups, %d omitted", len(a.Groups), a.GroupsOmitted)
		}
	})

	t.Run("default range", func(t *testing.T) {
		a := e.usage("")
		if a.Totals.Requests != 5 || len(a.Groups) != 1 || a.To.Sub(a.From) != 24*time.Hour || time.Since(a.To) > time.Minute {
			t.Errorf("default: %d requests, %d groups, from %v to %v", a.Totals.Requests, len(a.Groups), a.From, a.To)
		}
		if a := e.usage("?from=-7d"); a.Totals.Requests != 6 {
			t.Errorf("-7d: %d requests", a.Totals.Requests)
		}
	})

	t.Run("to in the past", func(t *testing.T) {
		// the rollups count a record by its own time, whenever it was
		// stored
		if a := e.usage("?from=" + from + "&to=-15m"); a.Totals.Requests != 5 || a.Truncated {
			t.Errorf("to -15m: %d requests, truncated %v", a.Totals.Requests, a.Truncated)
		}
		to := url.QueryEscape(base.Add(time.Hour).Format(time.RFC3339))
		if a := e.usage("?from=" + from + "&to=" + to); a.Totals.Requests != 2 {
			t.Errorf("first hour: %d requests", a.Totals.Requests)
		}
		// from and to are rounded outward to the minute
		mid := url.QueryEscape(base.Add(10*time.Minute + 30*time.Second).Format(time.RFC3339))
		if a := e.usage("?from=" + mid + "&to=" + to); a.Totals.Requests != 2 || !a.From.Equal(base.Add(10*time.Minute)) {
			t.Errorf("from 10:30 into the hour: %d requests from %v", a.Totals.Requests, a.From)
		}
	})

	t.Run("bad parameters", func(t *testing.T) {
		for _, tt := range []struct{ query, param string }{
			{"from=yesterday", "from"},
			{"from=-x", "from"},
			{"to=2026-13-01", "to"},
			{"from=-1h&to=-2h", "from"},
			{"group_by=client,colour", "group_by"},
			{"group_by=client,client", "group_by"},
			{"interval=week", "interval"},
			{"interval=minute&from=-30d", "interval"},
			{"limit=0", "limit"},
			{"limit=ten", "limit"},
			{"groupby=client", "groupby"},
		} {
			r := e.do("GET", "/admin/usage?"+tt.query, readToken, nil)
			r.expect(t, 400, codeBadRequest)
			msg, _ := r.body["error"].(map[string]any)["message"].(string)
			if !strings.HasPrefix(msg, tt.param+": ") {
				t.Errorf("%s: message %q does not name %s", tt.query, msg, tt.param)
			}
		}
	})

	t.Run("auth", func(t *testing.T) {
		e.do("GET", "/admin/usage", "", nil).expect(t, 401, codeUnauthorized)
		e.do("GET", "/admin/usage", "not-a-token", nil).expect(t, 401, codeUnauthorized)
		e.do("GET", "/admin/usage", clientKey, nil).expect(t, 401, codeUnauthorized)
		e.do("GET", "/admin/usage", readToken, nil).expect(t, 200, "")
		e.do("GET", "/admin/usage", opToken, nil).expect(t, 200, "")
	})

	t.Run("no secret in the answer", func(t *testing.T) {
		r := e.do("GET", "/admin/usage?group_by=client,key&from="+from, readToken, nil)
		for _, s := range []string{opToken, readToken, clientKey, "sk-old"} {
			if strings.Contains(string(r.raw), s) {
				t.Errorf("the answer carries %q", s)
			}
		}
	})

	t.Run("nats down", func(t *testing.T) {
		stopServer(e)
		testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
			if e.svc.natsUp() {
				return fmt.Errorf("still up")
			}
			return nil
		})
		e.do("GET", "/admin/usage", readToken, nil).expect(t, 503, codeNATSUnavailable)
		// a bad parameter is named first
		e.do("GET", "/admin/usage?limit=-1", readToken, nil).expect(t, 400, codeBadRequest)
	})
}

// TestUsagePercentiles: percentiles within 1 % over 100 records read from
// the stream (no recorder), and TTFT from streams only.
func TestUsagePercentiles(t *testing.T) {
	e := startEnvWith(t, envOptions{noRecorder: true})
	now := time.Now().UTC()
	var recs []usage.Record
	for i := 1; i <= 100; i++ {
		recs = append(recs, rec(fmt.Sprintf("p%03d", i), now.Add(-time.Duration(i)*time.Second), func(r *usage.Record) {
			r.LatencyMS = float64(101 - i) // 100 .. 1, out of order on purpose
			if i%2 == 0 {
				r.Stream, r.StreamCompleted, r.TTFTMS = true, true, float64(i) // 2, 4, ... 100
			}
		}))
	}
	e.publishUsage(recs...)
	// what is not a readable v1 record is counted, never summed
	e.publishRaw(usage.Subject("openai", "app"), []byte("not json"))
	v2 := rec("v2", now)
	v2.V = 2
	b, _ := json.Marshal(v2)
	e.publishRaw(usage.Subject("openai", "app"), b)

	a := e.usage("?from=-1h")
	if a.Scanned != 102 || a.Skipped != 2 || a.Matched != 100 {
		t.Fatalf("scanned %d skipped %d matched %d", a.Scanned, a.Skipped, a.Matched)
	}
	g := a.Totals
	if !nearPcts(g.LatencyMS, 50, 95) || !within1(g.LatencyMS.P99, 99) {
		t.Errorf("latency %+v, want p50 50 p95 95 p99 99 within 1 %%", g.LatencyMS)
	}
	// 50 streams with TTFT 2, 4, ..., 100: p95 is rank 0.95 x 49 = 46.55,
	// rounded down (DDSketch's definition): the 47th, 94
	if g.TTFTMS == nil || !nearPcts(*g.TTFTMS, 50, 94) || g.Streams != 50 {
		t.Errorf("ttft %+v streams %d", g.TTFTMS, g.Streams)
	}
}

// TestUsageTruncated: the read stops at the bound and says so.
func TestUsageTruncated(t *testing.T) {
	e := startEnvWith(t, envOptions{usageMaxScan: 5, noRecorder: true})
	now := time.Now().UTC()
	var recs []usage.Record
	for i := range 5 {
		recs = append(recs, rec(fmt.Sprintf("t%d", i), now.Add(-time.Duration(i+1)*time.Minute)))
	}
	e.publishUsage(recs...)
	// exactly the bound: complete
	if a := e.usage("?from=-1h"); a.Truncated || a.Scanned != 5 || a.MaxScanned != 5 {
		t.Fatalf("5 of 5: truncated %v scanned %d max %d", a.Truncated, a.Scanned, a.MaxScanned)
	}
	e.publishUsage(rec("t5", now.Add(-30*time.Second)), rec("t6", now.Add(-20*time.Second)))
	a := e.usage("?from=-1h&group_by=client")
	if !a.Truncated || a.TruncatedBy != "max_scanned" || a.Scanned != 5 || a.Totals.Requests != 5 || a.UnreadMessages == 0 {
		t.Fatalf("7 records, bound 5: truncated %v by %q scanned %d requests %d", a.Truncated, a.TruncatedBy, a.Scanned, a.Totals.Requests)
	}
	// a filter the stream applies reads only the matching records
	e.publishUsage(rec("other", now, func(r *usage.Record) { r.ClientID = "other" }))
	if a := e.usage("?from=-1h&client=other"); a.Truncated || a.Scanned != 1 || a.Totals.Requests != 1 {
		t.Fatalf("client other: truncated %v scanned %d", a.Truncated, a.Scanned)
	}
	// each report's consumer is deleted when it ends
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		info, err := e.proxy.Resources().Usage.Info(ctx)
		if err != nil {
			return err
		}
		if n := info.State.Consumers; n != 0 {
			return fmt.Errorf("%d consumers left on %s", n, bus.StreamUsage)
		}
		return nil
	})
}

// BenchmarkUsageRead reads 50,000 records through the ordered consumer and
// sums them by provider and model per hour: the cost of a report per
// record scanned (go test -run '^$' -bench UsageRead ./services/admin).
func BenchmarkUsageRead(b *testing.B) {
	const n = 50_000
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer natsembed.Stop(ns)
	_, js := testkit.ConnectNATS(b, ns.ClientURL())
	ctx := context.Background()
	res, err := bus.Setup(ctx, js, bus.SetupOptions{Storage: "memory"})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	providers := []string{"openai", "anthropic", "gemini"}
	for i := range n {
		r := rec(fmt.Sprintf("b%06d", i), now.Add(-time.Duration(i)*time.Second), func(r *usage.Record) {
			r.Provider = providers[i%3]
			r.Model = fmt.Sprintf("model-%d", i%5)
			r.LatencyMS = float64(i % 997)
		})
		data, _ := json.Marshal(r)
		if _, err := js.PublishAsync(usage.Subject(r.Provider, r.ClientID), data, jetstream.WithMsgID(r.RequestID)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publish did not complete")
	}
	q, err := parseUsageQuery(map[string]string{"group_by": "provider,model", "interval": "hour", "from": "-24h"}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	u := newUsageReader(0)
	st := rollup.NewStore(nil, res.UsageRollups, rollup.Resolutions(0, 0, 0))
	b.ReportAllocs()
	for b.Loop() {
		a, err := u.read(ctx, res.Usage, st, q)
		if err != nil {
			b.Fatal(err)
		}
		if a.Scanned != n || a.Truncated {
			b.Fatalf("scanned %d, truncated %v", a.Scanned, a.Truncated)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// TestUsageOpenAPI: the document describes every field of the answer, and
// no other.
func TestUsageOpenAPI(t *testing.T) {
	b, err := web.ReadFile("web/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	g := adminapi.UsageGroup{Bucket: &now, Key: map[string]string{"client": "app"}, CostUSD: cost(1), TTFTMS: &adminapi.Percentiles{}}
	for schema, v := range map[string]any{
		"UsageReport": adminapi.UsageReport{TruncatedBy: "deadline", Filters: adminapi.UsageFilters{Client: []string{"a"}}},
		"UsageGroup":  g,
	} {
		raw, _ := json.Marshal(v)
		var fields map[string]any
		_ = json.Unmarshal(raw, &fields)
		props := doc.Components.Schemas[schema].Properties
		for f := range fields {
			if props[f] == nil {
				t.Errorf("%s: field %q is not in openapi.json", schema, f)
			}
		}
		for p := range props {
			if _, ok := fields[p]; !ok {
				t.Errorf("%s: openapi.json has %q, the answer does not", schema, p)
			}
		}
	}
}

// TestUsageFailedAttempts: attempts count under their own target, so the
// failures a failover hid behind a success show under the key that
// failed, from the rollups and from records the recorder has not folded
// yet alike; a provider filter finds them in records another provider
// served; cancelled attempts are attempts, not failures.
func TestUsageFailedAttempts(t *testing.T) {
	for _, tt := range []struct {
		name   string
		opts   envOptions
		rolled bool
	}{{"rollups", envOptions{}, true}, {"stream", envOptions{noRecorder: true}, false}} {
		t.Run(tt.name, func(t *testing.T) {
			e := startEnvWith(t, tt.opts)
			now := time.Now().UTC().Add(-time.Minute)
			failed := func(provider, model, key, class string) usage.FailedAttempt {
				return usage.FailedAttempt{Provider: provider, Model: model, KeyID: key, Class: class}
			}
			e.publishUsage(
				rec("f0", now), // openai/primary, no failure
				rec("f1", now, func(r *usage.Record) { // two retries on primary, then secondary
					r.KeyID, r.Attempts = "secondary", 3
					r.FailedAttempts = []usage.FailedAttempt{failed("openai", "gpt-4o", "primary", "transient"), failed("openai", "gpt-4o", "primary", "transient")}
				}),
				rec("f2", now, func(r *usage.Record) { // primary rate-limited, anthropic served
					r.Provider, r.ProviderType, r.Model, r.KeyID, r.Attempts = "anthropic", "anthropic", "claude-x", "b1", 2
					r.FailedAttempts = []usage.FailedAttempt{failed("openai", "gpt-4o", "primary", "rate_limit")}
				}),
				rec("f3", now, func(r *usage.Record) { // failed on secondary
					r.KeyID, r.Status, r.Class, r.CostUSD = "secondary", 502, "transient", nil
					r.FailedAttempts = []usage.FailedAttempt{failed("openai", "gpt-4o", "secondary", "transient")}
				}),
				rec("f4", now, func(r *usage.Record) { // primary's attempt cut by the gateway, secondary served
					r.KeyID, r.Attempts = "secondary", 2
					a := failed("openai", "gpt-4o", "primary", "transient")
					a.Cancelled = true
					r.FailedAttempts = []usage.FailedAttempt{a}
				}),
			)
			if tt.rolled {
				e.waitRecorded()
			}
			check := func(a adminapi.UsageReport, g adminapi.UsageGroup, requests, attempts, failures int64) {
				t.Helper()
				if g.Requests != requests || g.Attempts != attempts || g.FailedAttempts != failures {
					t.Errorf("group %v: %d requests, %d attempts, %d failed; want %d, %d, %d (rolled up %d, scanned %d)",
						g.Key, g.Requests, g.Attempts, g.FailedAttempts, requests, attempts, failures, a.RolledUp, a.Scanned)
				}
			}
			a := e.usage("?from=-1h&group_by=key")
			check(a, findGroup(t, a, "key", "openai/primary"), 1, 5, 3)
			check(a, findGroup(t, a, "key", "openai/secondary"), 3, 3, 1)
			check(a, findGroup(t, a, "key", "anthropic/b1"), 1, 1, 0)
			check(a, a.Totals, 5, 9, 4)
			if tt.rolled != (a.RolledUp == 5) {
				t.Errorf("rolled up %d, scanned %d", a.RolledUp, a.Scanned)
			}

			a = e.usage("?from=-1h&group_by=key,class")
			check(a, findGroup(t, a, "key", "openai/primary", "class", "transient"), 0, 3, 2)
			check(a, findGroup(t, a, "key", "openai/primary", "class", "rate_limit"), 0, 1, 1)

			a = e.usage("?from=-1h&group_by=key&provider=openai")
			check(a, findGroup(t, a, "key", "openai/primary"), 1, 5, 3)
			check(a, a.Totals, 4, 8, 4)
			for _, g := range a.Groups {
				if strings.HasPrefix(g.Key["key"], "anthropic") {
					t.Errorf("provider=openai: group %v", g.Key)
				}
			}
		})
	}
}

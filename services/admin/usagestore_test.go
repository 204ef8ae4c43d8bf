package admin

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/shared/usage"
	"switchyard.dev/shared/usage/rollup"
)

// newTestStore is metering.store on pg, as Load would give it.
func newTestStore(tb testing.TB, pg *testkit.Postgres) *usageStore {
	tb.Helper()
	u, err := newUsageStore(config.Store{URL: pg.URL, Password: "env:PG_PASSWORD", PasswordValue: config.NewSecret(pg.Password)})
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// withStore gives a recorder the store, and a short retry.
func withStore(u *usageStore) func(*recorder) {
	return func(r *recorder) { r.store, r.retryMax = u, 200*time.Millisecond }
}

// pgConn connects to pg as the store does, closed when the test ends.
func pgConn(tb testing.TB, pg *testkit.Postgres) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cc, err := pgx.ParseConfig(pg.URL)
	if err != nil {
		tb.Fatal(err)
	}
	cc.Password = pg.Password
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// storedIDs reads every request id of the table, sorted, with the number
// of rows (which a duplicate would make larger than the ids).
func storedIDs(tb testing.TB, pg *testkit.Postgres) (ids []string, rows int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	conn := pgConn(tb, pg)
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+usageTable).Scan(&rows); err != nil {
		tb.Fatal(err)
	}
	r, err := conn.Query(ctx, `SELECT DISTINCT request_id FROM `+usageTable+` ORDER BY 1`)
	if err != nil {
		tb.Fatal(err)
	}
	ids, err = pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		tb.Fatal(err)
	}
	return ids, rows
}

// sameRows fails unless the table holds each of recs once, and nothing
// else.
func sameRows(t *testing.T, pg *testkit.Postgres, recs []usage.Record) {
	t.Helper()
	want := make([]string, len(recs))
	for i := range recs {
		want[i] = recs[i].RequestID
	}
	slices.Sort(want)
	got, rows := storedIDs(t, pg)
	if rows != len(want) || !slices.Equal(got, want) {
		t.Fatalf("table: %d rows, %d request ids; published %d records", rows, len(got), len(want))
	}
}

// startStoreTest starts PostgreSQL and NATS, publishes n records over the
// last span and records them with a store, until stop; the table then
// holds them.
func startStoreTest(t *testing.T, n int, span time.Duration) (*testkit.Postgres, *env, []usage.Record, *recorder, func()) {
	t.Helper()
	pg := testkit.StartPostgres(t)
	e := startEnvWith(t, envOptions{noRecorder: true})
	recs := usageBatch("a", n, span)
	e.publishUsage(recs...)
	r, stop := e.startRecorder("admin-a", context.Background(), withStore(newTestStore(t, pg)))
	e.waitRecorded()
	sameRows(t, pg, recs)
	return pg, e, recs, r, stop
}

// TestUsageStoreExactlyOnce: records published as the proxies publish
// them land as rows of switchyard_usage_records, each once and with every
// field; a recorder that restarts from an older checkpoint (as after dying
// between PostgreSQL's commit and its checkpoint) inserts nothing twice,
// and the rollups still equal a recount; the schema is migrated once.
func TestUsageStoreExactlyOnce(t *testing.T) {
	pg, e, first, _, stop := startStoreTest(t, 600, 72*time.Hour)
	stop()

	// one row, every column
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	conn := pgConn(t, pg)
	want := first[55] // failed, streamed, no cost, failed attempts, a guardrail's warning
	var got usage.Record
	var seq int64
	if err := conn.QueryRow(ctx, `SELECT `+strings.Join(usageColumns, ", ")+` FROM `+usageTable+` WHERE request_id = $1`, want.RequestID).Scan(
		&got.RequestID, &got.At, &got.ClientID, &got.Plan, &got.ClientType, &got.Endpoint, &got.ModelRequested,
		&got.Provider, &got.ProviderType, &got.Model, &got.KeyID, &got.Attempts, &got.Status, &got.Class,
		&got.Tokens.Input, &got.Tokens.Output, &got.Tokens.CachedInput, &got.Tokens.CacheWrite, &got.Tokens.Reasoning,
		&got.TokensEstimated, &got.CostUSD, &got.LatencyMS, &got.TTFTMS, &got.Stream, &got.StreamCompleted, &got.Cancelled, &seq, &got.FailedAttempts,
		&got.Guardrail, &got.GuardrailName, &got.GuardrailStage, &got.Cache, &got.CacheSavedUSD); err != nil {
		t.Fatal(err)
	}
	got.V = want.V
	if !got.At.Equal(want.At.Truncate(time.Microsecond)) || seq <= 0 { // PostgreSQL keeps microseconds
		t.Errorf("at %s (want %s), stream_seq %d", got.At, want.At, seq)
	}
	got.At = want.At
	if fmt.Sprint(got) != fmt.Sprint(want) || got.CostUSD != nil {
		t.Errorf("row\n%+v\nwant\n%+v", got, want)
	}

	// the checkpoint goes back to the middle (the recorder died after the
	// commit, before its checkpoint), more records come, another instance
	// replays
	st := rollup.NewStore(nil, e.proxy.Resources().UsageRollups, nil)
	ck, rev, err := st.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ck.Seq /= 2
	if _, err := st.PutCheckpoint(ctx, ck, rev); err != nil {
		t.Fatal(err)
	}
	second := usageBatch("b", 400, 24*time.Hour)
	e.publishUsage(second...)
	_, stop = e.startRecorder("admin-b", context.Background(), withStore(newTestStore(t, pg)))
	e.waitRecorded()
	stop()
	all := append(first, second...)
	sameRows(t, pg, all)
	e.sameRollups(all)
	var versions int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM switchyard_usage_schema`).Scan(&versions); err != nil || versions != len(usageMigrations) {
		t.Errorf("schema versions: %d (%v), want %d", versions, err, len(usageMigrations))
	}
}

// TestUsageStoreOutage: PostgreSQL stopped while records keep coming;
// the recorder's flushes fail and are tried again with the lease kept
// (another instance waiting does not take over), its checkpoint does not
// move; once PostgreSQL is back every record is a row, once, and the
// rollups equal a recount (the Folder's values written by the failed
// attempts are not folded twice).
func TestUsageStoreOutage(t *testing.T) {
	pg, e, first, r, stop := startStoreTest(t, 300, 48*time.Hour)
	before := r.checkpoint.Load()
	b, stopB := e.startRecorder("admin-b", context.Background(), withStore(newTestStore(t, pg)))

	pg.Stop()
	var second []usage.Record
	for i := range 5 { // several messages, several flushes' worth
		b := usageBatch("b"+strconv.Itoa(i), 100, 24*time.Hour)
		e.publishUsage(b...)
		second = append(second, b...)
	}
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		if n := r.flushFailures.Load(); n < 3 {
			return fmt.Errorf("%d failed flushes", n)
		}
		return nil
	})
	if got := r.checkpoint.Load(); got != before {
		t.Errorf("checkpoint moved from %d to %d while PostgreSQL was down", before, got)
	}
	if !r.active.Load() || b.active.Load() {
		t.Errorf("active during the outage: a %v, b %v (a failed flush gave up the lease)", r.active.Load(), b.active.Load())
	}
	pg.Start()
	e.waitRecorded()
	stop()
	stopB()
	all := append(first, second...)
	sameRows(t, pg, all)
	e.sameRollups(all)
}

// BenchmarkUsageStoreInsert: records a second into a local PostgreSQL
// through the store, in flushes of 5,000 (the recorder's largest batch of
// messages holds up to 100 records each; 5,000 records is a flush of a
// busy second):
//
//	go test -run '^$' -bench UsageStoreInsert -benchtime 20x ./services/admin
func BenchmarkUsageStoreInsert(b *testing.B) {
	pg := testkit.StartPostgres(b)
	u := newTestStore(b, pg)
	if err := u.Open(); err != nil {
		b.Fatal(err)
	}
	defer u.Close()
	per := 5000
	if v := os.Getenv("SWITCHYARD_BENCH_FLUSH"); v != "" {
		per, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	recs := usageBatch("x", per, time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	seq := uint64(0)
	for i := 0; b.Loop(); i++ {
		for j := range recs {
			recs[j].RequestID = "r" + strconv.Itoa(i) + "-" + strconv.Itoa(j)
		}
		for j := 0; j < per; j += 100 {
			seq++
			if err := u.Add(ctx, seq, recs[j:min(j+100, per)]); err != nil {
				b.Fatal(err)
			}
		}
		if err := u.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "records/s")
}

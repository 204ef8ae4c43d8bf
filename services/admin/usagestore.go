package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/usage"
)

// The usage store (metering.store): every usage record as one row of
// switchyard_usage_records in PostgreSQL, written by the recorder beside
// the rollups.
//
// Exactly once rests on the primary key, the request id: each flush
// copies the records folded since the last one into a temporary table
// (COPY, the fast path) and inserts them from there with ON CONFLICT DO
// NOTHING, in one transaction. The recorder moves its checkpoint only
// after the commit; a recorder that restarts from an older checkpoint (it
// died after the commit, or the commit's answer was lost) inserts the
// same request ids again, and nothing happens.

// usageTable is the table of every usage record.
const usageTable = "switchyard_usage_records"

// usageMigrations are the schema's versions: usageMigrations[i] takes the
// schema from version i to i+1. Only ever append.
var usageMigrations = []string{
	`CREATE TABLE switchyard_usage_records (
		request_id          text PRIMARY KEY,
		at                  timestamptz NOT NULL,
		client_id           text NOT NULL,
		plan                text NOT NULL,
		client_type         text NOT NULL,
		endpoint            text NOT NULL,
		model_requested     text NOT NULL,
		provider            text NOT NULL,
		provider_type       text NOT NULL,
		model               text NOT NULL,
		key_id              text NOT NULL,
		attempts            integer NOT NULL,
		status              integer NOT NULL,
		class               text NOT NULL,
		input_tokens        bigint NOT NULL,
		output_tokens       bigint NOT NULL,
		cached_input_tokens bigint NOT NULL,
		cache_write_tokens  bigint NOT NULL,
		reasoning_tokens    bigint NOT NULL,
		tokens_estimated    boolean NOT NULL,
		cost_usd            double precision,
		latency_ms          double precision NOT NULL,
		ttft_ms             double precision NOT NULL,
		stream              boolean NOT NULL,
		stream_completed    boolean NOT NULL,
		cancelled           boolean NOT NULL,
		stream_seq          bigint NOT NULL
	);
	CREATE INDEX switchyard_usage_records_at ON switchyard_usage_records (at);
	CREATE INDEX switchyard_usage_records_client_at ON switchyard_usage_records (client_id, at)`,
	// 2: the record's failed attempts (usage.Record.FailedAttempts as
	// JSON; NULL when none failed, and in the rows before)
	`ALTER TABLE switchyard_usage_records ADD COLUMN failed_attempts jsonb`,
	// 3: what the request's guardrails did (usage.Record.Guardrail,
	// GuardrailName, GuardrailStage; empty when none acted, and in the
	// rows before)
	`ALTER TABLE switchyard_usage_records ADD COLUMN guardrail text NOT NULL DEFAULT '',
		ADD COLUMN guardrail_name text NOT NULL DEFAULT '',
		ADD COLUMN guardrail_stage text NOT NULL DEFAULT ''`,
	// 4: what the response cache did (usage.Record.Cache, CacheSavedUSD;
	// '' and NULL without a cache policy, and in the rows before)
	`ALTER TABLE switchyard_usage_records ADD COLUMN cache text NOT NULL DEFAULT '',
		ADD COLUMN cache_saved_usd double precision`,
}

// usageColumns are the table's columns in the order usageRows gives them.
var usageColumns = []string{"request_id", "at", "client_id", "plan", "client_type", "endpoint",
	"model_requested", "provider", "provider_type", "model", "key_id", "attempts", "status", "class",
	"input_tokens", "output_tokens", "cached_input_tokens", "cache_write_tokens", "reasoning_tokens",
	"tokens_estimated", "cost_usd", "latency_ms", "ttft_ms", "stream", "stream_completed", "cancelled",
	"stream_seq", "failed_attempts", "guardrail", "guardrail_name", "guardrail_stage", "cache", "cache_saved_usd"}

// usageStore is the usage sink of metering.store. Open connects lazily;
// a Flush that finds PostgreSQL down fails and keeps what it holds, so
// the recorder can try it again.
type usageStore struct {
	cfg      *pgxpool.Config
	mu       sync.Mutex // guards pool (Open, Close) against Flush
	pool     *pgxpool.Pool
	migrated bool
	rows     []usageRow // added since the last commit
}

var _ usageSink = (*usageStore)(nil)

// usageRow is one record with the stream message it came in.
type usageRow struct {
	seq uint64
	i   int // its place in the message
	rec usage.Record
}

// newUsageStore parses metering.store; nil when it is not set.
func newUsageStore(s config.Store) (*usageStore, error) {
	if s.URL == "" {
		return nil, nil
	}
	pc, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		// pgconn's message redacts a password; the URL holds none anyway
		return nil, fmt.Errorf("metering.store.url: %w", err)
	}
	if !s.PasswordValue.IsZero() {
		pc.ConnConfig.Password = s.PasswordValue.Reveal()
	}
	pc.MaxConns = 2
	pc.ConnConfig.ConnectTimeout = opTimeout
	return &usageStore{cfg: pc}, nil
}

// Open makes the pool (it connects on first use).
func (u *usageStore) Open() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.pool != nil {
		return nil
	}
	p, err := pgxpool.NewWithConfig(context.Background(), u.cfg)
	if err != nil {
		return fmt.Errorf("usage store: %w", err)
	}
	u.pool = p
	return nil
}

// Close closes the pool (its connections and its health check).
func (u *usageStore) Close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.pool != nil {
		u.pool.Close()
		u.pool = nil
	}
}

// Add keeps the records of message seq until the next Flush.
func (u *usageStore) Add(_ context.Context, seq uint64, recs []usage.Record) error {
	for i := range recs {
		u.rows = append(u.rows, usageRow{seq: seq, i: i, rec: recs[i]})
	}
	return nil
}

// Reset drops what was not committed: the recorder reads it again from
// its checkpoint.
func (u *usageStore) Reset() { u.rows = u.rows[:0] }

// Flush commits every record added since the last commit, each at most
// once whatever the table holds already. On an error nothing of this
// flush is in the table (or all of it, when only the commit's answer was
// lost), and the records are kept for the next Flush.
func (u *usageStore) Flush(ctx context.Context) error {
	if len(u.rows) == 0 {
		return nil
	}
	u.mu.Lock()
	pool := u.pool
	u.mu.Unlock()
	if pool == nil {
		return errors.New("usage store: not open")
	}
	if !u.migrated {
		if err := migrateUsage(ctx, pool); err != nil {
			return err
		}
		u.migrated = true
	}
	ctx, cancel := context.WithTimeout(ctx, 4*opTimeout)
	defer cancel()
	if err := copyUsage(ctx, pool, u.rows); err != nil {
		return fmt.Errorf("usage store: write %d records: %w", len(u.rows), err)
	}
	u.rows = u.rows[:0]
	return nil
}

// copyUsage inserts rows in one transaction: COPY into a temporary table
// (emptied at each commit), then INSERT ... ON CONFLICT DO NOTHING.
func copyUsage(ctx context.Context, pool *pgxpool.Pool, rows []usageRow) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMPORARY TABLE IF NOT EXISTS switchyard_usage_staging
			(LIKE `+usageTable+`) ON COMMIT DELETE ROWS`); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"switchyard_usage_staging"}, usageColumns, &usageRows{rows: rows, i: -1}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+usageTable+` SELECT * FROM switchyard_usage_staging ON CONFLICT (request_id) DO NOTHING`)
		return err
	})
}

// migrateUsage brings the schema to the last version, one transaction
// under an advisory lock (two admin instances starting at once wait for
// each other); the version is in switchyard_usage_schema.
func migrateUsage(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, 4*opTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('switchyard_usage_schema'))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS switchyard_usage_schema (
			version integer PRIMARY KEY, migrated_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var v int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM switchyard_usage_schema`).Scan(&v); err != nil {
			return err
		}
		if v > len(usageMigrations) {
			return fmt.Errorf("the schema is at version %d, newer than this admin knows (%d): upgrade the admin", v, len(usageMigrations))
		}
		for i := v; i < len(usageMigrations); i++ {
			if _, err := tx.Exec(ctx, usageMigrations[i]); err != nil {
				return fmt.Errorf("migrate to version %d: %w", i+1, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO switchyard_usage_schema (version) VALUES ($1)`, i+1); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("usage store schema: %w", err)
	}
	return nil
}

// usageRows is rows as a pgx.CopyFromSource.
type usageRows struct {
	rows []usageRow
	i    int
	vals [33]any
}

func (r *usageRows) Next() bool { r.i++; return r.i < len(r.rows) }
func (r *usageRows) Err() error { return nil }

func (r *usageRows) Values() ([]any, error) {
	row := &r.rows[r.i]
	x := &row.rec
	id := x.RequestID
	if id == "" {
		// no id (never from a proxy): one made of its place in the
		// stream, the same on a replay
		id = "seq:" + strconv.FormatUint(row.seq, 10) + ":" + strconv.Itoa(row.i)
	}
	var cost, failed, saved any
	if x.CostUSD != nil {
		cost = *x.CostUSD
	}
	if x.CacheSavedUSD != nil {
		saved = *x.CacheSavedUSD
	}
	if x.FailedAttempts != nil {
		b, err := json.Marshal(x.FailedAttempts)
		if err != nil {
			return nil, err
		}
		failed = b
	}
	// at: what timestamptz keeps, microseconds
	r.vals = [...]any{id, x.At.UTC().Truncate(time.Microsecond), x.ClientID, x.Plan, x.ClientType, x.Endpoint,
		x.ModelRequested, x.Provider, x.ProviderType, x.Model, x.KeyID, int32(x.Attempts), int32(x.Status), x.Class,
		x.Tokens.Input, x.Tokens.Output, x.Tokens.CachedInput, x.Tokens.CacheWrite, x.Tokens.Reasoning,
		x.TokensEstimated, cost, x.LatencyMS, x.TTFTMS, x.Stream, x.StreamCompleted, x.Cancelled,
		int64(row.seq), failed, x.Guardrail, x.GuardrailName, x.GuardrailStage, x.Cache, saved}
	return r.vals[:], nil
}

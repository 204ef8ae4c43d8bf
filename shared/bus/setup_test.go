package bus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
)

func TestSetup(t *testing.T) {
	s := startTestServer(t)
	nc, js := testkit.ConnectNATS(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := WaitForJetStream(ctx, js); err != nil {
		t.Fatal(err)
	}
	opts := SetupOptions{Storage: "memory", EventsMaxAge: time.Hour}
	res, err := Setup(ctx, js, opts)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	// Idempotent: a second service binds to the same resources.
	res2, err := Setup(ctx, js, opts)
	if err != nil {
		t.Fatalf("second Setup: %v", err)
	}
	if res2.Holds.Bucket() != BucketHolds {
		t.Fatalf("bound to %s", res2.Holds.Bucket())
	}

	buckets := []struct {
		kv        jetstream.KeyValue
		name      string
		history   int64
		markerTTL time.Duration
	}{
		{res.Holds, BucketHolds, 1, LimitMarkerTTL},
		{res.Health, BucketHealth, 1, LimitMarkerTTL},
		{res.Leases, BucketLeases, 1, LimitMarkerTTL},
		{res.Credentials, BucketCredentials, CredentialsHistory, 0},
		{res.Limits, BucketLimits, 1, LimitMarkerTTL},
		{res.Config, BucketConfig, ConfigHistory, 0},
		{res.UsageRollups, BucketUsageRollups, 1, LimitMarkerTTL},
	}
	for _, b := range buckets {
		t.Run(b.name, func(t *testing.T) {
			st, err := b.kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Bucket() != b.name || st.History() != b.history || st.LimitMarkerTTL() != b.markerTTL ||
				st.BackingStore() != "JetStream" {
				t.Fatalf("%s: history %d, marker TTL %s", st.Bucket(), st.History(), st.LimitMarkerTTL())
			}
			info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
			if info.Config.Storage != jetstream.MemoryStorage || info.Config.Replicas != 1 {
				t.Fatalf("storage %s replicas %d", info.Config.Storage, info.Config.Replicas)
			}
		})
	}
	// Per-key TTLs work on the TTL buckets.
	if _, err := res.Leases.Create(ctx, "probe.openai.k1", []byte("me"), jetstream.KeyTTL(time.Second)); err != nil {
		t.Fatalf("create with TTL: %v", err)
	}
	info, err := res.Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if c.Name != StreamEvents || len(c.Subjects) != 1 || c.Subjects[0] != "switchyard.events.>" ||
		c.Retention != jetstream.LimitsPolicy || c.MaxAge != time.Hour {
		t.Fatalf("events stream config %+v", c)
	}
	if err := nc.Publish(EventSubject("hold", "openai", "k1"), []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		info, err := res.Events.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 1 {
			return connErr("event not captured")
		}
		return nil
	})

	// The usage stream captures usage records and stores a record
	// published twice (same request id) once.
	info, err = res.Usage.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.Config; c.Name != StreamUsage || len(c.Subjects) != 1 || c.Subjects[0] != "switchyard.usage.>" ||
		c.MaxAge != DefaultUsageMaxAge || c.Duplicates != UsageDuplicateWindow {
		t.Fatalf("usage stream config %+v", c)
	}
	for range 2 {
		if _, err := js.Publish(ctx, "switchyard.usage.openai.team", []byte(`{"v":1}`), jetstream.WithMsgID("req_1")); err != nil {
			t.Fatal(err)
		}
	}
	if info, err = res.Usage.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("usage stream: %v, %d records, want 1", err, info.State.Msgs)
	}
}

func TestConfigs(t *testing.T) {
	tests := []struct {
		name    string
		opts    SetupOptions
		want    string // error substring; "" for success
		storage jetstream.StorageType
		maxAge  time.Duration
	}{
		{name: "defaults", opts: SetupOptions{}, storage: jetstream.FileStorage, maxAge: DefaultEventsMaxAge},
		{name: "cluster", opts: SetupOptions{Replicas: 3, Storage: "file"}, storage: jetstream.FileStorage, maxAge: DefaultEventsMaxAge},
		{name: "memory", opts: SetupOptions{Storage: "Memory", EventsMaxAge: time.Hour}, storage: jetstream.MemoryStorage, maxAge: time.Hour},
		{name: "too many replicas", opts: SetupOptions{Replicas: 7}, want: "replicas"},
		{name: "bad storage", opts: SetupOptions{Storage: "disk"}, want: "storage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kvs, streams, err := Configs(tt.opts)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			replicas := max(tt.opts.Replicas, 1)
			var configBucket bool
			for _, kv := range kvs {
				if kv.Replicas != replicas || kv.Storage != tt.storage {
					t.Errorf("%s: replicas %d storage %s", kv.Bucket, kv.Replicas, kv.Storage)
				}
				if kv.LimitMarkerTTL > 0 && kv.History != 1 {
					t.Errorf("%s: per-key TTLs need History 1, got %d", kv.Bucket, kv.History)
				}
				if kv.Bucket == BucketConfig {
					// Versions are kept for ever and the active pointer
					// keeps its trail: no TTL, a history.
					configBucket = true
					if kv.LimitMarkerTTL != 0 || kv.TTL != 0 || kv.History != ConfigHistory {
						t.Errorf("%s: marker TTL %s, TTL %s, history %d", kv.Bucket, kv.LimitMarkerTTL, kv.TTL, kv.History)
					}
				}
			}
			if !configBucket {
				t.Errorf("no %s bucket", BucketConfig)
			}
			if len(streams) != 3 {
				t.Fatalf("%d streams, want events, usage and debug", len(streams))
			}
			for _, s := range streams {
				if s.Replicas != replicas || s.Storage != tt.storage {
					t.Errorf("stream %s: %+v", s.Name, s)
				}
			}
			if streams[0].MaxAge != tt.maxAge || streams[1].MaxAge != DefaultUsageMaxAge {
				t.Errorf("max ages %s, %s", streams[0].MaxAge, streams[1].MaxAge)
			}
			// No stream may grow until it fills the store: a full store
			// refuses every write, hold records included.
			for _, s := range streams {
				if s.MaxBytes <= 0 || s.Discard != jetstream.DiscardOld {
					t.Errorf("stream %s: max bytes %d, discard %v", s.Name, s.MaxBytes, s.Discard)
				}
			}
			if streams[0].MaxBytes != DefaultEventsMaxBytes || streams[1].MaxBytes != DefaultUsageMaxBytes {
				t.Errorf("max bytes %d, %d", streams[0].MaxBytes, streams[1].MaxBytes)
			}
			if d := streams[2]; d.Name != debug.Stream || d.MaxAge != debug.DefaultRetention || d.MaxBytes != debug.DefaultMaxBytes ||
				!d.AllowDirect || d.Discard != jetstream.DiscardOld {
				t.Errorf("debug stream %+v", d)
			}
		})
	}
	o := SetupOptionsFrom(&config.Config{NATS: config.NATS{Replicas: 3, Storage: "memory"}, Metering: config.Metering{Retention: time.Hour, MaxBytes: 7 << 20},
		Debug: config.Debug{Retention: 2 * time.Hour, MaxBytes: 5 << 20}})
	if o.Replicas != 3 || o.Storage != "memory" || o.UsageMaxAge != time.Hour || o.UsageMaxBytes != 7<<20 || o.DebugMaxAge != 2*time.Hour || o.DebugMaxBytes != 5<<20 {
		t.Fatalf("SetupOptionsFrom: %+v", o)
	}
}

func TestEventSubject(t *testing.T) {
	tests := []struct {
		kind, provider, key, want string
	}{
		{"hold", "openai-eu", "k1", "switchyard.events.hold.openai-eu.k1"},
		{"trip", "anthropic", "", "switchyard.events.trip.anthropic"},
		{"health", "", "", "switchyard.events.health._"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := EventSubject(tt.kind, tt.provider, tt.key); got != tt.want {
				t.Fatalf("EventSubject = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestFullUsageStreamDropsOldRecords: usage records beyond the stream's
// size limit push out the oldest, and the store keeps room for hold
// records (a full store refuses every write, to any stream or bucket).
func TestFullUsageStreamDropsOldRecords(t *testing.T) {
	o := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: t.TempDir(), JetStreamMaxStore: 8 << 20}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { natsembed.Stop(s) })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	_, js := testkit.ConnectNATS(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Setup(ctx, js, SetupOptions{UsageMaxBytes: 2 << 20, DebugMaxBytes: 1 << 20, EventsMaxBytes: 1 << 20, CacheMaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	rec := []byte(strings.Repeat("x", 16<<10))
	for i := range 1000 { // 16 MiB, twice the store
		if _, err := js.Publish(ctx, "switchyard.usage.openai.team", rec); err != nil {
			t.Fatalf("usage record %d refused: %v", i, err)
		}
	}
	if info, err := res.Usage.Info(ctx); err != nil || info.State.Bytes > 2<<20 {
		t.Fatalf("usage stream: %v, %+v", err, info)
	}
	if _, err := res.Holds.Create(ctx, "openai.k1", []byte(`{"v":1}`), jetstream.KeyTTL(time.Minute)); err != nil {
		t.Fatalf("a hold record after the usage stream filled: %v", err)
	}
}

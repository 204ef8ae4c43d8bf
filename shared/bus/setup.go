package bus

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/usage"
)

// The JetStream resources every Switchyard service shares. The names are
// public contracts (see the README's NATS contracts): operators and subscribers rely on them.
const (
	// BucketHolds keeps one hold record (JSON) per scope; key = scope id.
	BucketHolds = "switchyard_holds"
	// BucketHealth keeps one health record (JSON) per provider and target.
	BucketHealth = "switchyard_health"
	// BucketLeases keeps the prober replicas' check leases (per-key TTL); a
	// hold's probe lease lives in the hold record.
	BucketLeases = "switchyard_leases"
	// BucketCredentials keeps encrypted rotated secrets, a few revisions each.
	BucketCredentials = "switchyard_credentials"
	// BucketLimits keeps what each proxy's callers consumed against their
	// plans' limits, per client, window and instance (per-key TTL).
	BucketLimits = "switchyard_limits"
	// BucketConfig keeps the versioned routing configuration: one key
	// version.<N> per stored version, written once, and the active
	// pointer, changed by compare-and-set (package routingdoc).
	BucketConfig = "switchyard_config"
	// BucketUsageRollups keeps the usage rollups the admin's recorder
	// folds from StreamUsage (package usage/rollup): one value per
	// resolution, time bucket, provider and part, each with a per-key TTL
	// (its resolution's retention), and the recorder's checkpoint.
	BucketUsageRollups = "switchyard_usage_rollups"
	// BucketCache keeps the fleet's cached answers: key
	// <route>.<scope>.<sha256 of the request>, per-key TTL (the policy's),
	// bounded by cache.max_bytes (the oldest go first).
	BucketCache = "switchyard_cache"

	// StreamUsage keeps one usage record per request, published under
	// UsageSubjects.
	StreamUsage = "SWITCHYARD_USAGE"
	// UsageSubjects is the wildcard the usage stream captures
	// (usage.Subject names a record's subject).
	UsageSubjects = usage.SubjectPrefix + ".>"

	// StreamEvents captures every event published under EventsSubjects.
	StreamEvents = "SWITCHYARD_EVENTS"
	// EventsPrefix is the first two tokens of every event subject.
	EventsPrefix = "switchyard.events"
	// EventsSubjects is the wildcard the events stream captures.
	EventsSubjects = EventsPrefix + ".>"

	// BreakerPrefix is the first two tokens of the subjects on which the
	// circuit breakers share their counts (core NATS, no stream).
	BreakerPrefix = "switchyard.breaker"
	// BreakerSubjects is the wildcard every fleet member subscribes to.
	BreakerSubjects = BreakerPrefix + ".>"
)

// Setup defaults and fixed settings.
const (
	// DefaultEventsMaxAge is how long the events stream keeps an event.
	DefaultEventsMaxAge = 7 * 24 * time.Hour
	// DefaultUsageMaxAge is how long the usage stream keeps a record.
	DefaultUsageMaxAge = 30 * 24 * time.Hour
	// DefaultUsageMaxBytes bounds the usage stream (metering.max_bytes).
	DefaultUsageMaxBytes = 4 << 30
	// DefaultEventsMaxBytes bounds the events stream: the oldest events go
	// first. A stream without a bound could fill the NATS store, and a full
	// store refuses every write, hold records included.
	DefaultEventsMaxBytes = 256 << 20
	// UsageDuplicateWindow is how long the usage stream remembers a
	// message's id (the publishing proxy's own, for its batch of the
	// records that share a subject), so a batch published again after a
	// lost acknowledgement is stored once.
	UsageDuplicateWindow = 10 * time.Minute
	// LimitMarkerTTL is how long the TTL buckets keep the marker left by an
	// expired key. It makes per-key TTLs possible and lets watchers see
	// expiries (as purges); a watcher that was away for longer than this
	// reloads the whole bucket instead of resuming.
	LimitMarkerTTL = time.Hour
	// CredentialsHistory is how many revisions of a rotated secret are kept.
	CredentialsHistory = 5
	// ConfigHistory is how many revisions of each switchyard_config key are
	// kept: the active pointer's recent activation trail (the versions
	// themselves are written once and keep everything).
	ConfigHistory = 16
	// DefaultSetupTimeout bounds Setup when ctx has no deadline.
	DefaultSetupTimeout = 15 * time.Second
)

// SetupOptions are the settings of Setup that may differ between
// deployments (never between the services of one deployment).
type SetupOptions struct {
	// Replicas of every bucket and of the events stream: 1 for a single
	// server, 3 for a cluster. 0 means 1.
	Replicas int
	// Storage is "file" (default) or "memory".
	Storage string
	// EventsMaxAge and EventsMaxBytes bound the events stream; 0 means
	// DefaultEventsMaxAge, DefaultEventsMaxBytes.
	EventsMaxAge   time.Duration
	EventsMaxBytes int64
	// UsageMaxAge and UsageMaxBytes bound the usage stream
	// (metering.retention, metering.max_bytes); 0 means the defaults.
	UsageMaxAge   time.Duration
	UsageMaxBytes int64
	// DebugMaxAge and DebugMaxBytes bound the debug bundle stream
	// (debug.retention, debug.max_bytes); 0 means the defaults.
	DebugMaxAge   time.Duration
	DebugMaxBytes int64
	// CacheMaxBytes and CacheMaxEntryBytes bound the cache bucket
	// (cache.max_bytes, cache.max_entry_bytes); 0 means the defaults.
	CacheMaxBytes      int64
	CacheMaxEntryBytes int
}

// SetupOptionsFrom takes Replicas and Storage from the nats config section
// and the usage stream's retention from metering.retention.
func SetupOptionsFrom(cfg *config.Config) SetupOptions {
	return SetupOptions{Replicas: cfg.NATS.Replicas, Storage: cfg.NATS.Storage,
		UsageMaxAge: cfg.Metering.Retention, UsageMaxBytes: cfg.Metering.MaxBytes,
		DebugMaxAge: cfg.Debug.Retention, DebugMaxBytes: cfg.Debug.MaxBytes,
		CacheMaxBytes: cfg.Cache.MaxBytes, CacheMaxEntryBytes: cfg.Cache.MaxEntryBytes}
}

// Resources are the buckets and stream returned by Setup.
type Resources struct {
	Holds       jetstream.KeyValue
	Health      jetstream.KeyValue
	Leases      jetstream.KeyValue
	Credentials jetstream.KeyValue
	Limits      jetstream.KeyValue
	Config      jetstream.KeyValue
	// UsageRollups is BucketUsageRollups.
	UsageRollups jetstream.KeyValue
	// Cache is BucketCache.
	Cache  jetstream.KeyValue
	Events jetstream.Stream
	Usage  jetstream.Stream
	Debug  jetstream.Stream
}

// Setup creates the Switchyard buckets and events stream, or binds to them
// when they exist, updating them to the one configuration every service
// uses. It is idempotent: every service calls it at start.
//
// The TTL buckets (holds, health, leases) keep one value per key and allow
// per-key TTLs; once created that way a bucket cannot be switched back,
// which is why the configuration lives here and nowhere else.
func Setup(ctx context.Context, js jetstream.JetStream, opts SetupOptions) (*Resources, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultSetupTimeout)
		defer cancel()
	}
	kvs, streams, err := Configs(opts)
	if err != nil {
		return nil, err
	}
	res := &Resources{}
	dst := map[string]*jetstream.KeyValue{
		BucketHolds:        &res.Holds,
		BucketHealth:       &res.Health,
		BucketLeases:       &res.Leases,
		BucketCredentials:  &res.Credentials,
		BucketLimits:       &res.Limits,
		BucketConfig:       &res.Config,
		BucketUsageRollups: &res.UsageRollups,
		BucketCache:        &res.Cache,
	}
	for _, cfg := range kvs {
		kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("bus: set up KV bucket %s: %w", cfg.Bucket, err)
		}
		*dst[cfg.Bucket] = kv
	}
	dstStream := map[string]*jetstream.Stream{StreamEvents: &res.Events, StreamUsage: &res.Usage, debug.Stream: &res.Debug}
	for _, cfg := range streams {
		s, err := js.CreateOrUpdateStream(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("bus: set up stream %s: %w", cfg.Name, err)
		}
		*dstStream[cfg.Name] = s
	}
	return res, nil
}

// Configs returns the bucket and stream configurations Setup applies, for
// documentation, tests and deployment tooling.
func Configs(opts SetupOptions) ([]jetstream.KeyValueConfig, []jetstream.StreamConfig, error) {
	replicas := opts.Replicas
	if replicas == 0 {
		replicas = 1
	}
	if replicas < 1 || replicas > 5 {
		return nil, nil, fmt.Errorf("bus: setup: replicas must be between 1 and 5, got %d", replicas)
	}
	var storage jetstream.StorageType
	switch strings.ToLower(opts.Storage) {
	case "", "file":
		storage = jetstream.FileStorage
	case "memory":
		storage = jetstream.MemoryStorage
	default:
		return nil, nil, fmt.Errorf("bus: setup: storage must be file or memory, got %q", opts.Storage)
	}
	maxAge, eventsBytes := opts.EventsMaxAge, opts.EventsMaxBytes
	if maxAge <= 0 {
		maxAge = DefaultEventsMaxAge
	}
	if eventsBytes <= 0 {
		eventsBytes = DefaultEventsMaxBytes
	}
	usageAge, usageBytes := opts.UsageMaxAge, opts.UsageMaxBytes
	if usageAge <= 0 {
		usageAge = DefaultUsageMaxAge
	}
	if usageBytes <= 0 {
		usageBytes = DefaultUsageMaxBytes
	}
	debugAge, debugBytes := opts.DebugMaxAge, opts.DebugMaxBytes
	if debugAge <= 0 {
		debugAge = debug.DefaultRetention
	}
	if debugBytes <= 0 {
		debugBytes = debug.DefaultMaxBytes
	}
	ttlBucket := func(name, desc string) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{
			Bucket:         name,
			Description:    desc,
			History:        1,
			Storage:        storage,
			Replicas:       replicas,
			LimitMarkerTTL: LimitMarkerTTL,
		}
	}
	kvs := []jetstream.KeyValueConfig{
		ttlBucket(BucketHolds, "Switchyard hold records: key <provider>.<key id|_>[.<model>], JSON value"),
		ttlBucket(BucketHealth, "Switchyard health records per provider and target"),
		ttlBucket(BucketLeases, "Switchyard prober check leases (per-key TTL)"),
		ttlBucket(BucketLimits, "Switchyard plan consumption: key <client>.<counter>.<window>.<instance>, per-key TTL"),
		ttlBucket(BucketUsageRollups, "Switchyard usage rollups: key <minute|hour|day>.<start>.<provider>.<part>, per-key TTL; recorder.checkpoint"),
		cacheBucket(ttlBucket(BucketCache, "Switchyard cached answers: key <route>.<scope>.<request sha256>, per-key TTL"), opts),
		{
			Bucket:      BucketCredentials,
			Description: "Switchyard rotated secrets, encrypted",
			History:     CredentialsHistory,
			Storage:     storage,
			Replicas:    replicas,
		},
		{
			Bucket:      BucketConfig,
			Description: "Switchyard routing configuration: version.<N> written once, active pointer by compare-and-set",
			History:     ConfigHistory,
			Storage:     storage,
			Replicas:    replicas,
		},
	}
	streams := []jetstream.StreamConfig{{
		Name:        StreamEvents,
		Description: "Switchyard events (hold, release, trip, probe, health, credential, budget)",
		Subjects:    []string{EventsSubjects},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      maxAge,
		MaxBytes:    eventsBytes,
		Storage:     storage,
		Replicas:    replicas,
	}, {
		Name:        StreamUsage,
		Description: "Switchyard usage records, one per request: subject switchyard.usage.<provider>.<client>",
		Subjects:    []string{UsageSubjects},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      usageAge,
		MaxBytes:    usageBytes,
		Duplicates:  UsageDuplicateWindow,
		Storage:     storage,
		Replicas:    replicas,
	}, {
		Name:        debug.Stream,
		Description: "Switchyard request debug bundles: subject switchyard.debug.<outcome>.<provider>.<request id>",
		Subjects:    []string{debug.Subjects},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      debugAge,
		MaxBytes:    debugBytes,
		// Direct gets: any replica answers a lookup by request id.
		AllowDirect: true,
		Storage:     storage,
		Replicas:    replicas,
	}}
	return kvs, streams, nil
}

// CacheEnvelope is what a cache entry adds to the answer it keeps (its
// metadata), as MaxValueSize allows for.
const CacheEnvelope = 4 << 10

// cacheBucket bounds the cache bucket: its bytes (the oldest entries go
// first) and its values (an answer and its envelope).
func cacheBucket(c jetstream.KeyValueConfig, opts SetupOptions) jetstream.KeyValueConfig {
	c.MaxBytes, c.MaxValueSize = opts.CacheMaxBytes, int32(opts.CacheMaxEntryBytes)
	if c.MaxBytes <= 0 {
		c.MaxBytes = config.DefaultCacheMaxBytes
	}
	if c.MaxValueSize <= 0 {
		c.MaxValueSize = config.DefaultCacheMaxEntryBytes
	}
	c.MaxValueSize += CacheEnvelope
	return c
}

// EventSubject is the subject of an event:
// switchyard.events.<kind>.<provider>[.<key id>]. Provider names and key
// ids are restricted by config validation to [A-Za-z0-9_-]; an empty key
// id (a provider-wide event) drops the last token, an empty provider
// becomes "_".
func EventSubject(kind, provider, keyID string) string {
	if provider == "" {
		provider = "_"
	}
	s := EventsPrefix + "." + kind + "." + provider
	if keyID != "" {
		s += "." + keyID
	}
	return s
}

// BreakerSubject is the subject of a breaker tally:
// switchyard.breaker.<provider>[.<model token>], the model encoded as one
// token (hold.EncodeToken) and present for per-model breakers only.
func BreakerSubject(provider, modelToken string) string {
	s := BreakerPrefix + "." + provider
	if modelToken != "" {
		s += "." + modelToken
	}
	return s
}

// WaitForJetStream polls until JetStream answers (a cluster has elected its
// meta leader, a restarted server has recovered its streams) or ctx ends.
// Call it before Setup when NATS may have just started.
func WaitForJetStream(ctx context.Context, js jetstream.JetStream) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bus: wait for JetStream: %w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

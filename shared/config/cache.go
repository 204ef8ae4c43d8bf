package config

import (
	"fmt"
	"time"
)

// Cache is the fleet's response cache (cache:): the bounds of the
// switchyard_cache bucket every proxy shares and of each proxy's memory
// in front of it. Which requests are cached is the routes', plans' and
// client keys' CachePolicy.
type Cache struct {
	// MaxBytes bounds the bucket: the oldest entries go first.
	MaxBytes int64 `koanf:"max_bytes"`
	// MaxEntryBytes is the largest answer kept; a larger one is served
	// and not stored.
	MaxEntryBytes int `koanf:"max_entry_bytes"`
	// MemoryBytes bounds each proxy's in-memory layer (the entries it
	// stored or saw stored, newest kept).
	MemoryBytes int64 `koanf:"memory_bytes"`
	// LookupTimeout bounds the bucket read of a lookup the memory missed;
	// a late or failed read is a miss.
	LookupTimeout time.Duration `koanf:"lookup_timeout"`
	// ChargeHits charges a hit the cost of the answer it replays to plans
	// and budgets (default: a hit costs nothing).
	ChargeHits bool `koanf:"charge_hits"`
}

// Cache defaults.
const (
	DefaultCacheMaxBytes      = 256 << 20
	DefaultCacheMaxEntryBytes = 1 << 20
	DefaultCacheMemoryBytes   = 64 << 20
	DefaultCacheLookupTimeout = 50 * time.Millisecond
	// MinCacheTTL is the shortest entry TTL (NATS per-key TTLs are whole
	// seconds).
	MinCacheTTL = time.Second
)

// CachePolicy is a route's, plan's or client key's cache (cache: {ttl: 1h}):
// answers to its requests are kept for TTL. The most specific level that
// sets one wins (the client key's, then the plan's, then the route's).
type CachePolicy struct {
	// TTL is how long an answer is kept (whole seconds, at least 1s);
	// 0: this level sets nothing.
	TTL time.Duration `koanf:"ttl"`
	// Disabled turns the cache off at this level (over a less specific
	// level's TTL).
	Disabled bool `koanf:"disabled"`
	// Shared lets an answer serve every client key's identical request
	// (a route's policy only); by default an entry serves the key that
	// stored it.
	Shared bool `koanf:"shared"`
	// ToolCalls keeps answers that call tools too (not by default: a
	// tool call's effect is the caller's, not the model's).
	ToolCalls bool `koanf:"tool_calls"`
	// User makes the caller's "user" field part of the key.
	User bool `koanf:"user"`
	// Semantic also answers a chat request from the entry whose question
	// is nearest its own (a route's policy only; off by default).
	Semantic SemanticCache `koanf:"semantic"`
}

// SemanticCache is a route's semantic cache: the last user message of a
// chat request that missed is embedded through Model (an embedding model
// the gateway routes: provider/model or an alias), and the route's entry
// (for the same client key, or shared) whose question's embedding is
// nearest is the answer when their cosine similarity is at least
// Threshold.
type SemanticCache struct {
	Model     string  `koanf:"model"`
	Threshold float64 `koanf:"threshold"`
}

// DefaultSemanticThreshold is SemanticCache.Threshold's default.
const DefaultSemanticThreshold = 0.95

// On reports whether the semantic cache is on.
func (s SemanticCache) On() bool { return s.Model != "" }

// ThresholdOf is the threshold in force.
func (s SemanticCache) ThresholdOf() float64 {
	if s.Threshold == 0 {
		return DefaultSemanticThreshold
	}
	return s.Threshold
}

// Set reports whether the level sets anything.
func (p CachePolicy) Set() bool { return p.TTL > 0 || p.Disabled }

// EffectiveCache is the policy a request runs under: the most specific
// level that sets one (levels from the least specific: route, plan,
// client); ok is false when none enables the cache. Shared and Semantic
// are the route's alone.
func EffectiveCache(route CachePolicy, levels ...CachePolicy) (CachePolicy, bool) {
	p := route
	for _, l := range levels {
		if l.Set() {
			l.Shared, l.Semantic = route.Shared, route.Semantic
			p = l
		}
	}
	return p, p.TTL > 0 && !p.Disabled
}

func (v *validator) cache() {
	c := v.cfg.Cache
	if c.MaxBytes < 0 {
		v.add("cache.max_bytes", "must be >= 0 (0: %d), got %d", DefaultCacheMaxBytes, c.MaxBytes)
	}
	if c.MaxEntryBytes < 0 {
		v.add("cache.max_entry_bytes", "must be >= 0 (0: %d), got %d", DefaultCacheMaxEntryBytes, c.MaxEntryBytes)
	}
	if c.MemoryBytes < 0 {
		v.add("cache.memory_bytes", "must be >= 0 (0: %d), got %d", DefaultCacheMemoryBytes, c.MemoryBytes)
	}
	if c.LookupTimeout < 0 {
		v.add("cache.lookup_timeout", "must be >= 0, got %s", c.LookupTimeout)
	}
	for name, ch := range v.cfg.Chains {
		v.cachePolicy("chains."+name+".cache", ch.Cache, true)
	}
	for i, p := range v.cfg.Providers {
		for j, m := range p.Models {
			v.cachePolicy(fmt.Sprintf("providers[%d].models[%d].cache", i, j), m.Cache, true)
		}
	}
	for name, p := range v.cfg.Plans {
		v.cachePolicy("plans."+name+".cache", p.Cache, false)
	}
	for i, cl := range v.cfg.Clients {
		v.cachePolicy(fmt.Sprintf("clients[%d].cache", i), cl.Cache, false)
	}
}

func (v *validator) cachePolicy(at string, p CachePolicy, route bool) {
	switch {
	case p.TTL < 0:
		v.add(at+".ttl", "must be >= 0, got %s", p.TTL)
	case p.TTL > 0 && (p.TTL < MinCacheTTL || p.TTL%time.Second != 0):
		v.add(at+".ttl", "must be whole seconds, at least 1s, got %s", p.TTL)
	}
	if p.Shared && !route {
		v.add(at+".shared", "is a route's choice (chains.<name>.cache, providers[].models[].cache): an entry shared across client keys")
	}
	sm := p.Semantic
	switch {
	case !sm.On() && sm.Threshold != 0:
		v.add(at+".semantic.model", "must be set (an embedding model: provider/model or an alias of one)")
	case !sm.On():
	case !route:
		v.add(at+".semantic", "is a route's choice (chains.<name>.cache, providers[].models[].cache)")
	default:
		v.modelOfKind(at+".semantic.model", sm.Model, KindEmbedding, "a semantic cache")
		if sm.Threshold < 0 || sm.Threshold > 1 {
			v.add(at+".semantic.threshold", "must be between 0 and 1 (0: %v), got %v", DefaultSemanticThreshold, sm.Threshold)
		}
	}
}

// CacheOf is c's cache section with its defaults filled in.
func CacheOf(c Cache) Cache {
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultCacheMaxBytes
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = DefaultCacheMaxEntryBytes
	}
	if c.MemoryBytes == 0 {
		c.MemoryBytes = DefaultCacheMemoryBytes
	}
	if c.LookupTimeout == 0 {
		c.LookupTimeout = DefaultCacheLookupTimeout
	}
	return c
}

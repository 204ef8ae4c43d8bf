package admin

// The response cache's entries (switchyard_cache): GET /admin/cache lists
// them by route, client key or key prefix, GET /admin/cache/entries/{key}
// shows one with its answer, DELETE /admin/cache purges what matches
// (every proxy's memory follows the bucket).

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/answercache"
)

// Bounds of a cache listing.
const (
	defaultCacheLimit = 100
	maxCacheLimit     = 1000
	// purgeMarkerTTL is how long a purged entry's marker stays.
	purgeMarkerTTL = time.Minute
)

// cacheFilter is what a cache request selects: a route (as the gateway
// resolves it: chain:<name>, provider/model), a client key (its scope;
// "_shared" for the entries a route shares), a key prefix.
type cacheFilter struct {
	route, client, prefix string
}

func cacheFilterOf(c *fiber.Ctx) cacheFilter {
	return cacheFilter{route: strings.Clone(c.Query("route")), client: strings.Clone(c.Query("client")), prefix: strings.Clone(c.Query("prefix"))}
}

// keys are the bucket's keys that match f.
func (f cacheFilter) keys(ctx context.Context, kv jetstream.KeyValue) ([]string, error) {
	l, err := kv.ListKeysFiltered(ctx, answercache.Filter(f.route, f.client))
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range l.Keys() {
		if strings.HasPrefix(k, f.prefix) {
			out = append(out, k)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, ctx.Err()
	}
	return out, nil
}

// cacheBucket is the bound bucket (false: NATS is not reachable, the
// answer is given).
func (s *Service) cacheBucket(c *fiber.Ctx) (jetstream.KeyValue, bool) {
	if !s.natsUp() || s.member.Resources().Cache == nil {
		_ = natsDown(c)
		return nil, false
	}
	return s.member.Resources().Cache, true
}

// listCache: GET /admin/cache?route=&client=&prefix=&limit=: the first
// limit matching keys in key order, their entries newest first.
func (s *Service) listCache(c *fiber.Ctx) error {
	limit := defaultCacheLimit
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxCacheLimit {
			return apiError(c, fiber.StatusBadRequest, codeBadRequest, "limit must be between 1 and "+strconv.Itoa(maxCacheLimit))
		}
		limit = n
	}
	kv, ok := s.cacheBucket(c)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	keys, err := cacheFilterOf(c).keys(ctx, kv)
	if err != nil {
		s.log.Warn("admin: list the cache", "err", err)
		return natsDown(c)
	}
	slices.Sort(keys)
	out := adminapi.CacheList{Entries: []adminapi.CacheEntry{}, Matched: len(keys), Truncated: len(keys) > limit}
	now := time.Now()
	for _, k := range keys[:min(limit, len(keys))] {
		if e, err := getEntry(ctx, kv, k); err == nil && e.Live(now) {
			out.Entries = append(out.Entries, entryView(k, e, now, false))
		}
	}
	slices.SortFunc(out.Entries, func(a, b adminapi.CacheEntry) int { return b.StoredAt.Compare(a.StoredAt) })
	return c.JSON(out)
}

// getCacheEntry: GET /admin/cache/entries/{key}
func (s *Service) getCacheEntry(c *fiber.Ctx) error {
	key := pathParam(c, "key")
	if _, _, ok := answercache.Parts(key); !ok {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "not a cache key (<route>.<scope>.<sha256>): "+key)
	}
	kv, ok := s.cacheBucket(c)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	e, err := getEntry(ctx, kv, key)
	now := time.Now()
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && !e.Live(now)):
		return apiError(c, fiber.StatusNotFound, codeNotFound, "no cache entry "+key)
	case err != nil:
		s.log.Warn("admin: read a cache entry", "key", key, "err", err)
		return natsDown(c)
	}
	return c.JSON(entryView(key, e, now, true))
}

// purgeCache: DELETE /admin/cache?route=&client=&prefix= (all=true for
// every entry)
func (s *Service) purgeCache(c *fiber.Ctx) error {
	f := cacheFilterOf(c)
	if f == (cacheFilter{}) && c.Query("all") != "true" {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "name what to purge: route, client or prefix (all=true purges every entry)")
	}
	kv, ok := s.cacheBucket(c)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	keys, err := f.keys(ctx, kv)
	if err != nil {
		s.log.Warn("admin: list the cache to purge", "err", err)
		return natsDown(c)
	}
	n := 0
	for _, k := range keys {
		if err := kv.Purge(ctx, k, jetstream.PurgeTTL(purgeMarkerTTL)); err != nil {
			s.log.Warn("admin: cache purge stopped", "purged", n, "of", len(keys), "err", err)
			return natsDown(c)
		}
		n++
	}
	s.log.Info("admin: cache purged", "entries", n, "route", f.route, "client", f.client, "prefix", f.prefix, "by", tokenID(c))
	return c.JSON(adminapi.CachePurge{Purged: n})
}

func getEntry(ctx context.Context, kv jetstream.KeyValue, key string) (*answercache.Entry, error) {
	kve, err := kv.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return answercache.Decode(kve.Value())
}

func entryView(key string, e *answercache.Entry, now time.Time, withAnswer bool) adminapi.CacheEntry {
	v := adminapi.CacheEntry{Key: key, Route: e.Route, Scope: e.Scope, Endpoint: e.Endpoint, Provider: e.Provider,
		Model: e.Model, StoredAt: e.StoredAt, Expires: e.Expires, AgeS: e.Age(now), Bytes: e.Size(), CostUSD: e.CostUSD}
	if withAnswer {
		v.Answer, v.Events = e.Answer, e.Events
	}
	return v
}

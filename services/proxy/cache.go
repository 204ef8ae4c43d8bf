package proxy

// The response cache on the request path: a request of a route, plan or
// client key with a cache policy is looked up (the proxy's memory, then
// the switchyard_cache bucket) after it was admitted; a hit is answered
// from the entry, without an upstream call; a miss leads a flight that
// identical requests on this proxy wait for, and its answer, when whole
// and successful, is stored for the fleet (internal/cache).

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/internal/cache"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/services/proxy/internal/translate"
	"switchyard.dev/shared/answercache"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/usage"
)

// Cache headers: what the cache did for a request, and a hit's age.
const (
	headerCache    = "X-Switchyard-Cache"
	headerCacheAge = "X-Switchyard-Cache-Age"
	headerCacheTTL = "X-Switchyard-Cache-Ttl" // the caller's TTL for what its request stores
	// headerCacheSimilarity is a semantic hit's similarity to the entry.
	headerCacheSimilarity = "X-Switchyard-Cache-Similarity"
)

// Cache results, as the header, the metric and the usage record say them.
const (
	cacheHit    = "hit"
	cacheMiss   = "miss"
	cacheBypass = "bypass"
)

// cacheNote is what a request of a cached route keeps (request.sel.cache).
type cacheNote struct {
	key    string // "": not looked up (bypass)
	scope  string // the client key's id, or cache.SharedScope
	ttl    time.Duration
	pol    config.CachePolicy
	result string
	store  bool          // the answer may be stored
	vec    []float32     // the question's embedding (a semantic cache)
	flight *cache.Flight // the flight this request leads (nil: none)
	follow *follower     // the stream of an identical request this one follows (nil: none)
	entry  *cache.Entry  // the hit's, or what this request stored
}

// runCache binds the cache to the fleet's bucket once it exists, then
// writes and follows it until ctx ends.
func (s *Service) runCache(ctx context.Context) {
	select {
	case <-s.member.Bound():
		s.cache.Bind(s.member.Resources().Cache, s.member.Conn())
	case <-ctx.Done():
		return
	}
	s.cache.Run(ctx)
}

// cacheable reports whether answers of ep may be cached.
func cacheable(ep *endpoint) bool {
	switch ep.op {
	case provider.OpChat, provider.OpCompletions, provider.OpResponses, provider.OpEmbeddings:
		return true
	}
	return false
}

// routeCaches are the cache policies of a routing's routes, by route name
// (chains.<name>.cache; a model route's providers[].models[].cache), and
// whether any level of the configuration sets one.
func routeCaches(cfg *config.Config, table *route.Table) (map[string]config.CachePolicy, bool) {
	out := map[string]config.CachePolicy{}
	any := false
	for _, n := range table.Names {
		rte, ok := table.Resolve(n.ID)
		if !ok {
			continue
		}
		if _, done := out[rte.Name]; done {
			continue
		}
		var p config.CachePolicy
		if chain, ok := strings.CutPrefix(rte.Name, config.ChainPrefix); ok {
			p = cfg.Chains[chain].Cache
		} else if len(rte.Steps) > 0 && rte.Steps[0].Provider != nil {
			if pc := cfg.Provider(rte.Steps[0].Provider.Name); pc != nil {
				for _, m := range pc.Models {
					if m.Name == rte.Steps[0].Model {
						p = m.Cache
					}
				}
			}
		}
		out[rte.Name] = p
		any = any || p.Set()
	}
	for _, p := range cfg.Plans {
		any = any || p.Cache.Set()
	}
	for _, c := range cfg.Clients {
		any = any || c.Cache.Set()
	}
	return out, any
}

// cacheFront looks the request up when a cache policy applies: it
// reports true when the request was answered (a hit, or the answer of an
// identical request in flight).
func (r *request) cacheFront(c *fiber.Ctx, rte *route.Route) bool {
	if !r.rt.anyCache || !cacheable(r.ep) {
		return false
	}
	var plan, own config.CachePolicy
	if r.client != nil {
		plan, own = r.client.PlanCache, r.client.Cache
	}
	pol, ok := config.EffectiveCache(r.rt.caches[rte.Name], plan, own)
	if !ok {
		return false
	}
	n := &cacheNote{pol: pol, ttl: pol.TTL, result: cacheBypass}
	r.sel.cache = n
	cc := strings.ToLower(c.Get(fiber.HeaderCacheControl))
	if strings.Contains(cc, "no-store") {
		return r.cacheSay(c, n, false) // the caller's wish
	}
	if v := c.Get(headerCacheTTL); v != "" {
		if ttl, err := parseCacheTTL(v); err == nil {
			n.ttl = min(ttl, pol.TTL) // the operator's policy bounds the caller's
		}
	}
	scope := cache.SharedScope
	if !pol.Shared {
		scope = "_"
		if r.client != nil {
			scope = r.client.ID
		}
	}
	key, err := cache.Key(rte.Name, scope, r.ep.path, r.body, pol.User)
	if err != nil {
		return r.cacheSay(c, n, false)
	}
	if r.stream {
		return r.cacheFrontStream(c, rte, n, key, scope, !strings.Contains(cc, "no-cache"))
	}
	n.key, n.scope, n.store = key, scope, n.ttl >= config.MinCacheTTL
	n.result = cacheMiss
	if !strings.Contains(cc, "no-cache") {
		e, res := r.s.cache.Lookup(context.Background(), key)
		switch res {
		case cache.Hit:
			return r.serveCached(c, n, e, e.Answer, e.ContentType)
		case cache.Bypass:
			// the bucket is out of reach: the answer is kept in memory
			// (and in the bucket once it is back)
			n.result = cacheBypass
		}
		if e, sim, ok := r.semanticLookup(rte, n); ok {
			c.Set(headerCacheSimilarity, sim)
			return r.serveCached(c, n, e, e.Answer, e.ContentType)
		}
	}
	f, lead := r.s.cache.Join(key)
	if lead {
		n.flight = f
		return r.cacheSay(c, n, false)
	}
	ctx, cancel := r.waitContext()
	defer cancel()
	if e := f.Wait(ctx, r.goneC()); e != nil {
		return r.serveCached(c, n, e, e.Answer, e.ContentType)
	}
	return r.cacheSay(c, n, false) // the leader had nothing to share: this one goes upstream
}

// cacheFrontStream looks up a stream request (lookup: the caller did not
// say no-cache): it is answered from the whole answer when there is one,
// told as the endpoint's events, else from a stream kept as it was
// relayed (the proxy's memory first for both, then the bucket), else from
// a paraphrase's whole answer (a semantic cache); else it follows an
// identical stream in flight on this proxy (cachefollow.go), or leads
// one: relayed, and kept when it ends whole.
func (r *request) cacheFrontStream(c *fiber.Ctx, rte *route.Route, n *cacheNote, key, scope string, lookup bool) bool {
	skey := cache.StreamKey(key, r.use.callerUsage)
	n.result, n.scope = cacheMiss, scope
	if lookup {
		whole, hasWhole := r.s.cache.InMemory(key)
		kept, hasKept := r.s.cache.InMemory(skey)
		if !hasWhole && !hasKept {
			var res cache.Result
			if whole, res = r.s.cache.Lookup(context.Background(), key); res != cache.Bypass {
				hasWhole = res == cache.Hit
				kept, res = r.s.cache.Lookup(context.Background(), skey)
				hasKept = res == cache.Hit
			}
			if res == cache.Bypass {
				n.result = cacheBypass
			}
		}
		if hasWhole {
			if events, err := replay(r.ep, whole.Answer, r.use.callerUsage); err == nil {
				return r.serveCached(c, n, whole, events, "text/event-stream")
			}
		}
		if hasKept {
			return r.serveCached(c, n, kept, bytesOf(kept.Events), kept.ContentType) // SetBody copies it
		}
		// streams kept as relayed are not indexed: they are told only as
		// they were
		if e, sim, ok := r.semanticLookup(rte, n); ok {
			if events, err := replay(r.ep, e.Answer, r.use.callerUsage); err == nil {
				c.Set(headerCacheSimilarity, sim)
				return r.serveCached(c, n, e, events, "text/event-stream")
			}
		}
	}
	n.key, n.store = skey, n.ttl >= config.MinCacheTTL
	f, lead := r.s.cache.Join(skey)
	if lead {
		n.flight = f
	} else if r.follow(c, n, f) {
		return true
	}
	return r.cacheSay(c, n, false)
}

// waitContext bounds a wait of the request by its deadline.
func (r *request) waitContext() (context.Context, context.CancelFunc) {
	if r.deadline.IsZero() {
		return context.WithCancel(context.Background())
	}
	return context.WithDeadline(context.Background(), r.deadline)
}

// cacheSay sets the cache header and counts the result; it returns
// answered.
func (r *request) cacheSay(c *fiber.Ctx, n *cacheNote, answered bool) bool {
	c.Set(headerCache, n.result)
	r.s.metrics.cacheResult(n.result)
	return answered
}

// serveCached answers the request from entry e: body (its answer, or its
// replay as a stream) of contentType.
func (r *request) serveCached(c *fiber.Ctx, n *cacheNote, e *cache.Entry, body []byte, contentType string) bool {
	n.result, n.entry = cacheHit, e
	r.use.routed = true
	r.use.clientType = usage.ClientType(c.Get(fiber.HeaderUserAgent)) // as run counts a served request's
	r.use.tokensOK = true                                             // a hit used no tokens (ChargeHits: the entry's)
	if r.s.cfg.Cache.ChargeHits {
		r.use.tokens = e.Tokens
	}
	r.by.provider, r.by.provType, r.by.upModel, r.by.keyID = e.Provider, e.ProviderType, e.Model, e.KeyID
	c.Status(fiber.StatusOK)
	c.Response().Header.SetContentType(contentType)
	c.Response().SetBody(body)
	c.Set(headerProvider, e.Provider)
	c.Set(headerCacheAge, strconv.FormatInt(e.Age(time.Now()), 10))
	r.logger().Info("request served from the cache", "model", r.model, "age_s", e.Age(time.Now()))
	return r.cacheSay(c, n, true)
}

// cacheStore keeps a whole, successful answer of a request that missed
// (not one that calls tools, unless the policy allows it; not one over
// cache.max_entry_bytes), and lands the request's flight.
func (r *request) cacheStore(t target, out []byte, contentType string) {
	n := r.sel.cache
	if n == nil || !n.store || n.key == "" {
		return
	}
	switch {
	case len(out) > r.s.cache.MaxEntry():
		r.s.metrics.cacheStored("too_large")
		return
	case !n.pol.ToolCalls && callsTools(out):
		r.s.metrics.cacheStored("tool_calls")
		return
	}
	now := time.Now()
	e := &cache.Entry{V: cache.SchemaVersion, StoredAt: now.UTC(), Expires: now.Add(n.ttl).UTC(), Endpoint: r.ep.path,
		Route: r.sel.route.Name, Scope: n.scope,
		Provider: t.step.Provider.Name, ProviderType: t.step.Provider.Adapter.Type(), Model: t.step.Upstream, KeyID: t.key.ID,
		Tokens: r.use.tokens, ContentType: contentType}
	if contentType == "text/event-stream" {
		e.Events = string(out)
	} else {
		e.Answer = bytes.Clone(out)
	}
	if usd, ok := r.rt.prices.Cost(e.Provider, e.ProviderType, e.Model, e.Tokens); ok && r.use.tokensOK {
		e.CostUSD = &usd
	}
	if e.Events == "" {
		e.Embedding = n.vec // a semantic hit replays a whole answer, also as a stream
	}
	n.entry = e
	if r.s.cache.Put(n.key, e, n.ttl) {
		r.s.metrics.cacheStored("stored")
	} else {
		r.s.metrics.cacheStored("memory_only")
	}
}

// cacheLand ends the flight the request leads, sharing what it stored.
func (r *request) cacheLand() {
	if n := r.sel.cache; n != nil && n.flight != nil {
		var e *cache.Entry
		if n.result != cacheHit {
			e = n.entry
		}
		r.s.cache.Land(n.key, n.flight, e)
		n.flight = nil
	}
}

// replay tells a cached answer as the stream ep would have sent.
func replay(ep *endpoint, answer []byte, includeUsage bool) ([]byte, error) {
	switch {
	case ep.format == provider.FormatAnthropic && ep.op == provider.OpChat:
		return translate.MessagesAnswerToStream(answer)
	case ep.op == provider.OpResponses:
		return translate.ResponsesAnswerToStream(answer)
	case ep.op == provider.OpCompletions:
		return translate.CompletionAnswerToStream(answer, includeUsage)
	case ep.op == provider.OpChat:
		return translate.ChatAnswerToStream(answer, includeUsage)
	}
	return nil, translate.ErrNotReplayable
}

// callsTools reports whether an answer calls tools (chat tool_calls,
// Anthropic tool_use blocks, Responses function calls).
func callsTools(out []byte) bool {
	return bytes.Contains(out, []byte(`"tool_calls"`)) || bytes.Contains(out, []byte(`"tool_use"`)) ||
		bytes.Contains(out, []byte(`"function_call"`))
}

// parseCacheTTL reads X-Switchyard-Cache-Ttl: seconds, or a Go duration.
func parseCacheTTL(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	return d.Truncate(time.Second), err
}

// semanticLookup finds, on a route with a semantic cache, the entry whose
// question is nearest the request's last user message (its embedding,
// asked through the gateway's own pipeline, is kept for the answer's
// entry), and how near it is (X-Switchyard-Cache-Similarity). A failed
// embedding is a miss.
func (r *request) semanticLookup(rte *route.Route, n *cacheNote) (*cache.Entry, string, bool) {
	sm := n.pol.Semantic
	if !sm.On() || r.ep.op != provider.OpChat {
		return nil, "", false
	}
	text := lastUserText(r.body)
	if text == "" {
		return nil, "", false
	}
	body, _ := json.Marshal(struct {
		Model string `json:"model"`
		Input string `json:"input"`
	}{sm.Model, text})
	ans, err := r.internalCall(epEmbeddings.path, body, config.DefaultCheckTimeout)
	var v struct {
		Data []struct {
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err == nil {
		err = json.Unmarshal(ans, &v)
	}
	if err != nil || len(v.Data) == 0 || len(v.Data[0].Embedding) == 0 {
		r.logger().Warn("semantic cache: the question was not embedded", "model", sm.Model, "err", err)
		return nil, "", false
	}
	n.vec = cache.Normalize(v.Data[0].Embedding)
	e, sim, ok := r.s.cache.Nearest(answercache.KeyPrefix(rte.Name, n.scope), r.ep.path, n.vec, sm.ThresholdOf())
	return e, similarity(sim), ok
}

// similarity is a semantic hit's X-Switchyard-Cache-Similarity.
func similarity(sim float64) string { return strconv.FormatFloat(sim, 'f', 4, 64) }

// lastUserText is the text of a chat request's last user message (the
// OpenAI and Anthropic formats: a string, or its text parts), "" for none.
func lastUserText(body []byte) string {
	var b struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	for i := len(b.Messages) - 1; i >= 0; i-- {
		m := b.Messages[i]
		if m.Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			return s
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		_ = json.Unmarshal(m.Content, &parts)
		var out []string
		for _, p := range parts {
			if p.Type == "text" {
				out = append(out, p.Text)
			}
		}
		return strings.Join(out, "\n")
	}
	return ""
}

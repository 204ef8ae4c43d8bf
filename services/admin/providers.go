package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/credentials"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
)

func hasBreaker(set *hold.Settings) bool {
	return set.Breaker.Enabled && set.Breaker.ConsecutiveFailures > 0
}

func (s *Service) resilience(rt *routing, p *config.Provider) adminapi.Resilience {
	set := s.engine.Policy().For(p.Name)
	var v adminapi.Resilience
	v.Ladders = map[string]adminapi.Ladder{}
	for c, l := range set.Ladders {
		v.Ladders[c.String()] = adminapi.Ladder{Base: l.Base.String(), Ceiling: l.Ceiling.String()}
	}
	v.StatedWaitFloor = set.StatedWaitFloor.String()
	v.Jitter = set.Jitter
	v.Ramp.StartShare = set.RampStartShare
	v.Ramp.Duration = set.RampDuration.String()
	v.Probe.Lease = set.ProbeLease.String()
	b := set.Breaker
	v.Breaker.Enabled = hasBreaker(set)
	v.Breaker.Scope = "provider"
	if b.PerModel {
		v.Breaker.Scope = "model"
	}
	v.Breaker.ConsecutiveFailures = b.ConsecutiveFailures
	v.Breaker.Cooldown = b.Cooldown.String()
	v.Breaker.MaxCooldown = b.MaxCooldown.String()
	v.Breaker.FailureOnStatuses = []string{}
	for _, r := range b.FailureOnStatuses {
		if r.Lo == r.Hi {
			v.Breaker.FailureOnStatuses = append(v.Breaker.FailureOnStatuses, fmt.Sprint(r.Lo))
		} else {
			v.Breaker.FailureOnStatuses = append(v.Breaker.FailureOnStatuses, fmt.Sprintf("%d-%d", r.Lo, r.Hi))
		}
	}
	v.AllHeldPolicy = set.AllHeld
	rules, src := rt.cfg.TripRules, "global"
	if p.TripRules != nil {
		rules, src = p.TripRules, "provider"
	}
	v.TripOnSource = src
	v.TripOn = ruleViews(rules)
	return v
}

// ruleViews shows compiled trip_on rules.
func ruleViews(rules []failure.Rule) []adminapi.TripRule {
	out := []adminapi.TripRule{}
	for _, r := range rules {
		rv := adminapi.TripRule{Name: r.Name, Class: r.Class.String()}
		if r.Match != nil {
			rv.Match = r.Match.String()
		}
		if r.TTL > 0 {
			rv.TTL = r.TTL.String()
		}
		out = append(out, rv)
	}
	return out
}

// status builds the status of every configured provider.
func (s *Service) status() []adminapi.ProviderStatus {
	now := time.Now()
	recs := s.engine.Holds()
	circuits := s.engine.BreakerStates()
	snap := s.health.Snapshot()
	healthOf := func(provider, key string) (string, string) {
		if snap == nil {
			return "unknown", ""
		}
		if r, ok := snap.Get(provider, key); ok && r.Status != "" {
			return string(r.Status), r.Reason
		}
		return "unknown", ""
	}
	s.rotMu.Lock()
	rotated := make(map[string]rotation, len(s.rotated))
	for k, v := range s.rotated {
		rotated[k] = v
	}
	s.rotMu.Unlock()

	room := s.headroomByKey(now)
	rt := s.routing()
	out := make([]adminapi.ProviderStatus, 0, len(rt.cfg.Providers))
	for i := range rt.cfg.Providers {
		p := &rt.cfg.Providers[i]
		ps := adminapi.ProviderStatus{Name: p.Name, Type: p.Type, Holds: []adminapi.Hold{}, Keys: []adminapi.KeyStatus{}}
		ps.Health, ps.HealthReason = healthOf(p.Name, "")
		ps.Resilience = s.resilience(rt, p)
		ps.CircuitState = "disabled"
		if ps.Resilience.Breaker.Enabled {
			ps.CircuitState = "closed"
		}
		for name, st := range circuits {
			prov, model, _ := strings.Cut(name, "/")
			if prov != p.Name {
				continue
			}
			if model == "" {
				ps.CircuitState = st
				continue
			}
			if ps.ModelCircuits == nil {
				ps.ModelCircuits = map[string]string{}
			}
			ps.ModelCircuits[model] = st
			if worse(st, ps.CircuitState) {
				ps.CircuitState = st
			}
		}
		keyIdx := map[string]int{}
		for _, k := range p.Keys {
			ks := adminapi.KeyStatus{ID: k.ID, Fingerprint: k.Value.Fingerprint(), Priority: k.Priority, Weight: k.Weight,
				Enabled: k.IsEnabled(), Holds: []adminapi.Hold{}, Headroom: room[[2]string{p.Name, k.ID}]}
			ks.Health, ks.HealthReason = healthOf(p.Name, k.ID)
			if r, ok := rotated[p.Name+"/"+k.ID]; ok {
				ks.Fingerprint = r.Fingerprint
				at := r.RotatedAt
				ks.RotatedAt = &at
			}
			keyIdx[k.ID] = len(ps.Keys)
			ps.Keys = append(ps.Keys, ks)
		}
		live, ramping, providerHeld := 0, 0, false
		keysHeld := map[string]bool{}
		for _, r := range recs {
			if r.Scope.Provider != p.Name {
				continue
			}
			v := view(r, now)
			if v.Live {
				live++
				switch {
				case r.Scope.Kind == hold.ScopeProvider && r.Source != hold.SourceBreaker:
					providerHeld = true
				case r.Scope.Kind == hold.ScopeKey:
					keysHeld[r.Scope.Key] = true
				}
			} else {
				ramping++
			}
			if i, ok := keyIdx[r.Scope.Key]; ok && r.Scope.Key != "" {
				ps.Keys[i].Holds = append(ps.Keys[i].Holds, v)
			} else {
				ps.Holds = append(ps.Holds, v)
			}
		}
		// Offline by its keys: none of the keys that take traffic is free
		// (a key switched off counts as not free).
		allKeys := len(p.Keys) > 0
		for _, k := range p.Keys {
			if k.IsEnabled() && !keysHeld[k.ID] {
				allKeys = false
				break
			}
		}
		switch {
		case ps.CircuitState == "open":
			ps.Status = adminapi.StatusCircuitOpen
		case providerHeld || allKeys:
			ps.Status = adminapi.StatusOffline
		case ps.CircuitState == "half-open":
			ps.Status = adminapi.StatusRecovering
		case live > 0:
			ps.Status = adminapi.StatusDegraded
		case ramping > 0:
			ps.Status = adminapi.StatusRecovering
		default:
			ps.Status = adminapi.StatusHealthy
		}
		out = append(out, ps)
	}
	return out
}

// worse orders circuit states: open > half-open > closed.
func worse(a, b string) bool {
	rank := map[string]int{"open": 3, "half-open": 2, "closed": 1}
	return rank[a] > rank[b]
}

// providersStatus: GET /admin/providers/status
func (s *Service) providersStatus(c *fiber.Ctx) error {
	return c.JSON(adminapi.ProvidersStatus{Providers: s.status(), NATS: s.natsUp(), Instance: s.member.Instance, GeneratedAt: time.Now().UTC()})
}

// resetProvider: POST /admin/providers/{name}/reset: releases every live
// hold of the provider (its breaker trip included: each proxy's breaker
// starts over closed when it sees the trip hold released). 204 all
// released; 202 when some releases are queued (see writeOutcome), with the
// ids written and queued; 404 unknown provider; 400 when the provider has
// no breaker; 503 when a release was not queued (the answer names what was
// released or queued before it).
func (s *Service) resetProvider(c *fiber.Ctx) error {
	p := s.routing().cfg.Provider(c.Params("name"))
	if p == nil {
		return apiError(c, fiber.StatusNotFound, codeNotFound, "unknown provider "+c.Params("name"))
	}
	name := p.Name // the configuration's string: fiber's is not safe to keep
	if !hasBreaker(s.engine.Policy().For(name)) {
		return apiError(c, fiber.StatusBadRequest, codeNoBreaker, "provider "+name+" has no circuit breaker (resilience.breaker.enabled is false, or consecutive_failures is 0); release its holds one by one")
	}
	if !s.natsUp() {
		return natsDown(c)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	released, queuedIDs := []string{}, []string{}
	for _, r := range s.engine.Holds() {
		if r.Scope.Provider != name || !view(r, time.Now()).Live {
			continue
		}
		err := s.engine.Release(ctx, r.ID, hold.SourceAdmin)
		if errors.Is(err, hold.ErrNotFound) {
			continue
		}
		switch outcome(ctx, err, func() bool { return s.released(r.ID) }) {
		case written:
			released = append(released, r.ID)
		case queued:
			queuedIDs = append(queuedIDs, r.ID)
		default:
			s.log.Warn("admin: reset provider", "provider", name, "hold", r.ID, "err", err, "released", released, "queued", queuedIDs)
			msg := fmt.Sprintf("NATS is unavailable: hold %s was not released (nothing queued); try again when the admin service is ready (/readyz)", r.ID)
			if len(released)+len(queuedIDs) > 0 {
				msg += fmt.Sprintf(". Before it, released: [%s]; queued (they land when JetStream answers): [%s]",
					strings.Join(released, ", "), strings.Join(queuedIDs, ", "))
			}
			return apiError(c, fiber.StatusServiceUnavailable, codeNATSUnavailable, msg)
		}
	}
	if len(queuedIDs) > 0 {
		s.log.Warn("admin: provider reset queued: the hold store did not take every release yet", "provider", name, "released", released, "queued", queuedIDs, "by", tokenID(c))
		return queuedAnswer(c, fiber.Map{"provider": name, "released": released, "queued": queuedIDs})
	}
	s.log.Info("admin: provider reset", "provider", name, "released", len(released), "by", tokenID(c))
	return c.SendStatus(fiber.StatusNoContent)
}

type rotateRequest struct {
	Secret string `json:"secret"`
}

// maxSecret bounds a rotated secret.
const maxSecret = 8 << 10

// rotateKey: PUT /admin/providers/{name}/keys/{id} {"secret": "..."}:
// stores the secret encrypted in switchyard_credentials (every proxy swaps
// it within a second), releases the key's holds and publishes a
// credential event. The answer never contains the secret.
func (s *Service) rotateKey(c *fiber.Ctx) error {
	p := s.routing().cfg.Provider(c.Params("name"))
	if p == nil {
		return apiError(c, fiber.StatusNotFound, codeNotFound, "unknown provider "+c.Params("name"))
	}
	// The configuration's strings from here on: fiber's point into the
	// request buffer, and these go into records, events and metric labels.
	name, id := p.Name, ""
	for _, k := range p.Keys {
		if k.ID == c.Params("id") {
			id = k.ID
		}
	}
	if id == "" {
		return apiError(c, fiber.StatusNotFound, codeNotFound, "provider "+name+" has no key "+c.Params("id"))
	}
	var req rotateRequest
	if err := decodeBody(c.Request().Body(), &req); err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	switch {
	case req.Secret == "":
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "secret must not be empty")
	case len(req.Secret) > maxSecret:
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "secret is too long")
	}
	// The secret goes into request headers: a NUL, a tab or a space at
	// either end would have upstreams answer 400, which the proxies return
	// to callers (request_rejected: no failover, no hold).
	if err := config.CheckSecret(req.Secret); err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "secret: "+err.Error())
	}
	if s.box == nil {
		return apiError(c, fiber.StatusConflict, codeRotationOff, "credential rotation is off: set credentials.encryption_key (the same key on the admin service and every proxy)")
	}
	res := s.member.Resources()
	if !s.natsUp() || res == nil {
		return natsDown(c)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	secret := config.NewSecret(req.Secret)
	rec, rev, err := credentials.Put(ctx, res.Credentials, s.box, name, id, secret, tokenID(c))
	if err != nil {
		s.log.Warn("admin: rotate", "provider", name, "key", id, "err", err)
		return natsDown(c)
	}
	s.noteRotation(rec, rev)
	released, err := s.engine.ReleaseKey(ctx, name, id, hold.SourceCredential)
	releases := "written"
	if err != nil {
		// the releases apply here and stay queued in the engine's writer
		releases = "queued"
		s.log.Warn("admin: release holds after rotation queued: the hold store did not take them yet", "provider", name, "key", id, "err", err)
	}
	s.publishCredential(rec)
	s.met.rotations.WithLabelValues(name).Inc()
	s.log.Info("admin: credential rotated", "provider", name, "key", id, "fingerprint", rec.Fingerprint, "released", released, "by", tokenID(c))
	return c.JSON(fiber.Map{
		"provider": name, "key": id, "fingerprint": rec.Fingerprint, "revision": rev,
		"rotated_at": rec.RotatedAt, "released_holds": released, "releases": releases,
	})
}

// rotation is a key's last rotation as the status shows it: its record
// (no secret) and its revision in switchyard_credentials.
type rotation struct {
	credentials.Record
	rev uint64
}

// noteRotation keeps r (written at bucket revision rev) when it is the
// key's latest: by revision, the order the proxies apply rotations in, not
// by rotated_at, which is each writer's own clock.
func (s *Service) noteRotation(r credentials.Record, rev uint64) {
	s.rotMu.Lock()
	defer s.rotMu.Unlock()
	if cur, ok := s.rotated[r.Provider+"/"+r.Key]; !ok || cur.rev < rev {
		s.rotated[r.Provider+"/"+r.Key] = rotation{Record: r, rev: rev}
	}
}

// publishCredential publishes the credential event of a rotation on
// switchyard.events.credential.<provider>.<key id>.
func (s *Service) publishCredential(r credentials.Record) {
	ev := hold.Event{
		Version:     hold.EventSchemaVersion,
		Kind:        hold.EventCredential,
		Scope:       hold.Scope{Kind: hold.ScopeKey, Provider: r.Provider, Key: r.Key},
		Class:       failure.Unrecognised,
		Fingerprint: r.Fingerprint,
		Reason:      "secret rotated by " + r.RotatedBy,
		Outcome:     "rotated",
		Source:      hold.SourceAdmin,
		RecordedBy:  s.member.Instance,
		At:          r.RotatedAt,
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	if err := s.nc.Publish(bus.EventSubject(string(ev.Kind), r.Provider, r.Key), data); err != nil {
		s.log.Warn("admin: publish credential event", "err", err)
	}
}

package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/jsonfield"
)

// view is r as the API shows it at now.
func view(r hold.Record, now time.Time) adminapi.Hold {
	v := adminapi.Hold{Record: r, Live: r.State == hold.StateHeld || r.State == hold.StateProbing}
	end := r.Until
	if r.State == hold.StateReleased {
		end = r.RampUntil
	}
	if d := end.Sub(now); d > 0 {
		v.RemainingMS = d.Milliseconds()
	}
	return v
}

// pathParam returns the route parameter name URL-decoded (fiber matches
// the raw path: a hold's scope id carries '=' escapes of model names, a
// chain or request id may hold any character, and clients escape them), as
// a string of its own: fiber's points into the request buffer, and the
// engine or an edit may keep it.
func pathParam(c *fiber.Ctx, name string) string {
	v := strings.Clone(c.Params(name))
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}

// A write of the hold engine (Pin, Release) applies the change to this
// instance's table, queues it in the engine's writer and waits for the
// first write attempt to switchyard_holds. When that attempt fails, or does
// not answer within opTimeout, the change stays queued and the writer
// retries it until it lands: the admin then answers 202 "queued", never an
// error for a change that will happen. Only a change that was not queued
// answers 503 (nothing changed).
type writeOutcome int

const (
	written   writeOutcome = iota // the first write attempt stored it
	queued                        // applied here and queued: it lands when JetStream answers
	notQueued                     // nothing changed
)

// outcome classifies the error of an engine write made with ctx. applied
// reports whether the change is in the local table now (the engine applies
// it there before queueing its write, and only then).
func outcome(ctx context.Context, err error, applied func() bool) writeOutcome {
	switch {
	case err == nil:
		return written
	case ctx.Err() == nil && errors.Is(err, context.Canceled):
		// the engine stopped (the service shuts down): its queue is gone
		return notQueued
	case applied():
		return queued
	}
	return notQueued
}

// queuedMessage is the message of a 202 answer.
const queuedMessage = "NATS JetStream did not take the write yet (no answer within 5s, or an error: e.g. a leader election). " +
	"The change applies on this admin instance and is queued: it is written to switchyard_holds, and reaches the fleet, " +
	"as soon as JetStream answers (retried every 0.1s to 5s), unless a later change to the same hold replaces it first " +
	"or this admin instance stops before then. GET /admin/holds/{id} shows it; /readyz is 200 again once JetStream answers."

// queuedAnswer answers 202 for a change that was queued.
func queuedAnswer(c *fiber.Ctx, body fiber.Map) error {
	body["status"] = adminapi.StatusQueued
	body["message"] = queuedMessage
	return c.Status(fiber.StatusAccepted).JSON(body)
}

// listHolds: GET /admin/holds?provider=&key=&model=&class=&state=
func (s *Service) listHolds(c *fiber.Ctx) error {
	f := struct{ provider, key, model, class, state string }{
		c.Query("provider"), c.Query("key"), c.Query("model"), c.Query("class"), c.Query("state"),
	}
	if f.state != "" && !slices.Contains([]string{"live", "held", "probing", "released"}, f.state) {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "state must be live, held, probing or released")
	}
	var class failure.Class
	if f.class != "" {
		var err error
		if class, err = failure.ParseClass(f.class); err != nil {
			return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
		}
	}
	now := time.Now()
	out := []adminapi.Hold{}
	for _, r := range s.engine.Holds() {
		v := view(r, now)
		switch {
		case f.provider != "" && r.Scope.Provider != f.provider,
			f.key != "" && r.Scope.Key != f.key,
			f.model != "" && r.Scope.Model != f.model,
			f.class != "" && r.Class != class,
			f.state == "live" && !v.Live,
			f.state != "" && f.state != "live" && string(r.State) != f.state:
			continue
		}
		out = append(out, v)
	}
	return c.JSON(adminapi.HoldList{Holds: out, NATS: s.natsUp()})
}

// getHold: GET /admin/holds/{id}
func (s *Service) getHold(c *fiber.Ctx) error {
	id := pathParam(c, "id")
	r, ok := s.engine.Hold(id)
	if !ok {
		return apiError(c, fiber.StatusNotFound, codeNotFound, "no hold "+id)
	}
	return c.JSON(view(r, time.Now()))
}

// releaseHold: DELETE /admin/holds/{id}: 204 released; 202 queued (see
// writeOutcome); the target returns through a fresh ramp. 404 when there
// is no live hold with that id; 503 when nothing was changed.
func (s *Service) releaseHold(c *fiber.Ctx) error {
	id := pathParam(c, "id")
	r, ok := s.engine.Hold(id)
	if !ok || !view(r, time.Now()).Live {
		return apiError(c, fiber.StatusNotFound, codeNotFound, "no live hold "+id)
	}
	if !s.natsUp() {
		return natsDown(c)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	err := s.engine.Release(ctx, id, hold.SourceAdmin)
	if errors.Is(err, hold.ErrNotFound) {
		return apiError(c, fiber.StatusNotFound, codeNotFound, "no live hold "+id)
	}
	switch outcome(ctx, err, func() bool { return s.released(id) }) {
	case queued:
		s.log.Warn("admin: hold release queued: the hold store did not take it yet", "hold", id, "by", tokenID(c), "err", err)
		r, _ := s.engine.Hold(id)
		return queuedAnswer(c, fiber.Map{"id": id, "hold": view(r, time.Now())})
	case notQueued:
		s.log.Warn("admin: release hold", "hold", id, "err", err)
		return natsDown(c)
	}
	s.log.Info("admin: hold released", "hold", id, "by", tokenID(c))
	return c.SendStatus(fiber.StatusNoContent)
}

// released reports whether the local table has hold id released (ramping
// back): a release applied here.
func (s *Service) released(id string) bool {
	r, ok := s.engine.Hold(id)
	return ok && r.State == hold.StateReleased
}

// pinRequest is the body of POST /admin/holds: an operator drain.
type pinRequest struct {
	Provider string    `json:"provider"`
	Key      string    `json:"key"`
	Model    string    `json:"model"`
	Duration string    `json:"duration"` // Go duration, e.g. "30m"
	Until    time.Time `json:"until"`    // alternative to duration
	Reason   string    `json:"reason"`
}

// MaxPin is the longest operator pin.
const MaxPin = 30 * 24 * time.Hour

// pinHold: POST /admin/holds: 201 with the record; 202 queued (see
// writeOutcome) with the record as applied here; 503 when nothing was
// changed.
func (s *Service) pinHold(c *fiber.Ctx) error {
	var req pinRequest
	if err := decodeBody(c.Request().Body(), &req); err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	now := time.Now()
	scope, until, err := s.checkPin(req, now)
	if err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	if !s.natsUp() {
		return natsDown(c)
	}
	reason := strings.TrimSpace(req.Reason)
	if reason == "" {
		reason = "operator pin"
	}
	reason = fmt.Sprintf("%s (pinned by %s)", reason, tokenID(c))
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	id := scope.ID()
	pinned := func() (hold.Record, bool) {
		r, ok := s.engine.Hold(id)
		return r, ok && r.Pinned && r.Until.Equal(until)
	}
	err = s.engine.Pin(ctx, scope, until, reason)
	switch outcome(ctx, err, func() bool { _, ok := pinned(); return ok }) {
	case queued:
		s.log.Warn("admin: pin queued: the hold store did not take it yet", "hold", id, "until", until, "by", tokenID(c), "err", err)
		r, _ := pinned()
		return queuedAnswer(c, fiber.Map{"id": id, "hold": view(r, time.Now())})
	case notQueued:
		s.log.Warn("admin: pin", "scope", id, "err", err)
		return natsDown(c)
	}
	s.log.Info("admin: pinned", "hold", id, "until", until, "by", tokenID(c))
	r, ok := s.engine.Hold(id)
	if !ok {
		return apiError(c, fiber.StatusInternalServerError, codeInternal, "pin written but not in the table")
	}
	return c.Status(fiber.StatusCreated).JSON(view(r, time.Now()))
}

func (s *Service) checkPin(req pinRequest, now time.Time) (hold.Scope, time.Time, error) {
	p := s.routing().cfg.Provider(req.Provider)
	if req.Provider == "" {
		return hold.Scope{}, time.Time{}, errors.New("provider is required")
	}
	if p == nil {
		return hold.Scope{}, time.Time{}, fmt.Errorf("unknown provider %q", req.Provider)
	}
	if req.Key != "" && !slices.ContainsFunc(p.Keys, func(k config.Key) bool { return k.ID == req.Key }) {
		return hold.Scope{}, time.Time{}, fmt.Errorf("provider %s has no key %q", p.Name, req.Key)
	}
	if req.Model != "" {
		if err := s.checkPinModel(p, req.Model); err != nil {
			return hold.Scope{}, time.Time{}, err
		}
	}
	if len(req.Reason) > 200 {
		return hold.Scope{}, time.Time{}, errors.New("reason is longer than 200 characters")
	}
	if strings.ContainsFunc(req.Reason, unicode.IsControl) || !utf8.ValidString(req.Reason) {
		// the reason reaches the record, its events, logs and the
		// dashboard: one line of text
		return hold.Scope{}, time.Time{}, errors.New("reason must be one line of text, without control characters")
	}
	var until time.Time
	switch {
	case req.Duration != "" && !req.Until.IsZero():
		return hold.Scope{}, time.Time{}, errors.New("give duration or until, not both")
	case req.Duration != "":
		d, err := time.ParseDuration(req.Duration)
		if err != nil {
			return hold.Scope{}, time.Time{}, fmt.Errorf("duration: %w", err)
		}
		until = now.Add(d)
	case !req.Until.IsZero():
		until = req.Until
	default:
		return hold.Scope{}, time.Time{}, errors.New(`duration (e.g. "30m") or until (RFC 3339) is required`)
	}
	if d := until.Sub(now); d < time.Second || d > MaxPin {
		return hold.Scope{}, time.Time{}, fmt.Errorf("a pin lasts between 1s and %s", MaxPin)
	}
	sc := hold.Scope{Provider: p.Name, Key: req.Key, Model: req.Model}
	switch {
	case sc.Key == "" && sc.Model == "":
		sc.Kind = hold.ScopeProvider
	case sc.Key == "":
		sc.Kind = hold.ScopeProviderModel
	case sc.Model == "":
		sc.Kind = hold.ScopeKey
	default:
		sc.Kind = hold.ScopeKeyModel
	}
	return sc, until, nil
}

// decodeBody decodes one JSON object into v (a pointer to a struct),
// refusing unknown fields, anything after the object, and what parsers
// read differently (jsonfield.Strict): a key named twice (encoding/json
// keeps the last), top-level keys that differ only in case, or one that
// differs only in case from a field of v (encoding/json would take it for
// the field).
func decodeBody(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errors.New("empty body: want a JSON object")
	}
	err := jsonfield.DecodeStrict(body, v)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jsonfield.ErrTrailing):
		return errors.New("body: trailing data after the object")
	}
	return fmt.Errorf("body: %w", err)
}

// checkPinModel checks the model of a pin: one the provider has configured
// by that name, or listed at its last discovery by the prober. Proxies and
// the prober hold and admit a target by its model's configured name
// (route.Step.Model), never by the name sent upstream: a pin of an upstream
// name (config {name: fast, upstream: gpt-4o}, a pin of gpt-4o) would hold
// nothing while traffic to fast kept flowing. Such a pin is refused with
// the configured names to pin instead, rather than translated: a pin is
// one hold record whose id the operator then lists and releases, and an
// upstream name may stand for several configured models.
func (s *Service) checkPinModel(p *config.Provider, model string) error {
	var names []string
	for _, m := range p.Models {
		switch {
		case m.Name == model:
			return nil
		case m.Upstream == model:
			names = append(names, m.Name)
		}
	}
	if len(names) > 0 {
		return fmt.Errorf("model %q is the upstream name of provider %s's configured model %s: holds and traffic use the configured name; pin model %s instead",
			model, p.Name, strings.Join(names, ", "), strings.Join(quoteAll(names), " or "))
	}
	if snap := s.health.Snapshot(); snap != nil {
		if r, ok := snap.Get(p.Name, ""); ok && slices.Contains(r.Models, model) {
			return nil
		}
	}
	return fmt.Errorf("provider %s has no model %q (neither configured nor discovered by the prober)", p.Name, model)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

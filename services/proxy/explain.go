package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/headroom"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/jsonfield"
)

// runExplain answers route explanations (bus.ExplainSubject, in the
// proxies' queue group: one proxy answers each) until ctx ends.
func (s *Service) runExplain(ctx context.Context) {
	nc := s.member.Conn()
	sub, err := nc.QueueSubscribe(bus.ExplainSubject, bus.ExplainQueue, func(m *nats.Msg) {
		data, _ := json.Marshal(s.explain(m.Data))
		_ = m.Respond(data)
	})
	if err != nil {
		s.log.Warn("route explanations not answered", "err", err)
		return
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
}

// mapHeaders are an explanation's headers, looked up case-insensitively.
type mapHeaders map[string]string

func (h mapHeaders) Get(key string, _ ...string) string {
	for k, v := range h {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

// explain answers one explanation request: the routing a request would
// get on this proxy now (nothing is sent).
func (s *Service) explain(data []byte) bus.ExplainReply {
	rt := s.rt.Load()
	reply := bus.ExplainReply{V: bus.ExplainVersion, Instance: s.member.Instance, RoutingVersion: rt.version}
	fail := func(status int, code, format string, args ...any) bus.ExplainReply {
		reply.Error = &bus.ExplainError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
		return reply
	}
	var q bus.ExplainRequest
	if err := json.Unmarshal(data, &q); err != nil {
		return fail(http.StatusBadRequest, "invalid_request", "the explanation request is not valid JSON: %v", err)
	}
	if q.V != bus.ExplainVersion {
		return fail(http.StatusBadRequest, "invalid_request", "v is %d, want %d", q.V, bus.ExplainVersion)
	}
	ep := epChat
	if q.Endpoint != "" {
		ep = nil
		var names []string
		for _, e := range endpoints {
			names = append(names, e.name)
			if e.name == q.Endpoint {
				ep = e
			}
		}
		if ep == nil {
			return fail(http.StatusBadRequest, "invalid_request", "unknown endpoint %q (want one of: %s)", q.Endpoint, strings.Join(names, ", "))
		}
	}
	if len(q.Body) > 0 {
		if b := strings.TrimSpace(string(q.Body)); b == "null" {
			q.Body = nil
		} else if !strings.HasPrefix(b, "{") {
			return fail(http.StatusBadRequest, "invalid_request", "body must be a JSON object")
		}
	}
	model := q.Model
	if model == "" && q.Body != nil {
		model, _ = jsonfield.String(q.Body, "model")
	}
	if model == "" {
		return fail(http.StatusBadRequest, "invalid_request", "model must be set")
	}
	rte, ok := rt.table.Resolve(model)
	if !ok {
		return fail(http.StatusNotFound, gwerror.ModelNotFound, "the model `%s` does not exist on this gateway", model)
	}
	r := &request{s: s, rt: rt, ep: ep, model: model, body: q.Body}
	r.estimateInput()
	if q.Client != "" {
		r.client = rt.clients.Load().ByID(q.Client)
		if r.client == nil {
			return fail(http.StatusNotFound, "client_not_found", "no client key with id %q", q.Client)
		}
		if !r.client.Allows(model, rte.Steps) {
			return fail(http.StatusForbidden, gwerror.ModelNotAllowed, "client %q may not use the model `%s`", q.Client, model)
		}
	}
	r.selection(mapHeaders(q.Headers), rte)
	x := rte.Explain(model, &r.sel.req, func(st *route.Step) []route.KeyChoice { return s.keyChoices(st, r.sel.req.Room) })
	raw, err := json.Marshal(x)
	if err != nil {
		return fail(http.StatusInternalServerError, "internal_error", "%v", err)
	}
	reply.Explanation = raw
	return reply
}

// keyChoices describes a step's keys as Pick would consider them, from
// the hold engine's records (read-only: no probe is taken) and, with
// headroom routing on (rm), what is left of their windows.
func (s *Service) keyChoices(st *route.Step, rm *route.Room) []route.KeyChoice {
	p := st.Provider
	out := make([]route.KeyChoice, 0, len(p.Keys))
	for _, k := range p.Keys {
		kc := route.KeyChoice{ID: k.ID, State: route.KeyAvailable}
		if p.KeyUnhealthy(k) {
			kc.State = route.KeyUnhealthy
		}
		for _, rec := range s.engine.Covering(p.Name, k.HoldKey(), st.Model) {
			if rec.State == hold.StateReleased {
				if kc.State == route.KeyAvailable {
					kc.State = route.KeyRamping
				}
				continue
			}
			kc.State, kc.HoldID, kc.Class = route.KeyHeld, rec.ID, rec.Class.String()
			kc.Until = rec.Until.UTC().Format(time.RFC3339)
			break
		}
		if rm != nil {
			explainRoom(&kc, rm, k, st.ModelRoom(k))
		}
		out = append(out, kc)
	}
	return out
}

// explainRoom adds to kc the windows of key k (and of the step's model on
// it) and, for a key neither held nor unhealthy, the headroom state when
// they cannot fit the request.
func explainRoom(kc *route.KeyChoice, rm *route.Room, k *route.Key, model *headroom.Slot) {
	var wins []headroom.Snapshot
	wins = model.Windows(k.Room.Windows(wins))
	for _, w := range wins {
		ew := bus.ExplainWindow{Kind: w.Kind.String(), Limit: w.Limit,
			Remaining: w.Remaining, InFlight: w.InFlight, Reset: time.Unix(0, w.Reset).UTC().Format(time.RFC3339Nano)}
		if w.Own != w.Remaining {
			ew.Own = &w.Own
		}
		kc.Headroom = append(kc.Headroom, ew)
	}
	if kc.State != route.KeyAvailable && kc.State != route.KeyRamping {
		return
	}
	if ok, reset := rm.Fits(k, model); !ok {
		kc.State = route.KeyNoHeadroom
		if reset != 0 {
			kc.Until = time.Unix(0, reset).UTC().Format(time.RFC3339)
		}
	}
}

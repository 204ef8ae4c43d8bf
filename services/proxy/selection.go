package proxy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/headroom"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/provider"
)

// headers reads request headers (*fiber.Ctx; an explanation's map).
type headers interface {
	Get(key string, defaultValue ...string) string
}

// selection fills what routing knows of the request (route.Request): the
// operation, the capabilities and output its body asks for, its estimated
// prompt, the hash its route's policy sticks on, its region (a header, else
// its client key's setting) and the providers' budgets.
func (r *request) selection(c headers, rte *route.Route) {
	r.sel.route = rte
	sel := &r.sel.req
	sel.Op = r.ep.op
	sel.InputTokens = r.use.estIn
	if r.ep.op == provider.OpChat && rte.ReadsBody {
		sel.Needs, sel.MaxOutput = route.Needs(r.body)
	}
	if rte.Policy.Strategy == route.Weighted && rte.Policy.HashOn != "" {
		sel.Hash, sel.Hashed = r.hashOf(c, rte.Policy.HashOn)
	}
	rc := &r.rt.cfg.Routing
	if r.client != nil && r.client.RegionRequired {
		// The key's requests must be served in its region: an operator's
		// rule (data residency) that no header of the caller's undoes.
		sel.Region, sel.RegionRequired = r.client.Region, true
	} else if v := c.Get(headerOr(rc.RegionHeader, config.DefaultRegionHeader)); v != "" {
		sel.Region = strings.Clone(strings.ToLower(strings.TrimSpace(v))) // the header's buffer is reused
		sel.RegionRequired = strings.EqualFold(c.Get(headerOr(rc.RegionRequiredHeader, config.DefaultRegionRequiredHeader)), "true")
	} else if r.client != nil && r.client.Region != "" {
		sel.Region, sel.RegionRequired = r.client.Region, r.client.RegionRequired
	}
	if r.rt.budgets != nil {
		sel.Budget = r.rt.budgets.remaining
	}
	r.startRoom()
}

// hashOf is the hash of the attribute on names (client, user,
// header:<Name>); false when the request has none (weighted selection then
// rotates).
func (r *request) hashOf(c headers, on string) (uint64, bool) {
	var v string
	switch {
	case on == "client":
		if r.client != nil {
			v = r.client.ID
		}
	case on == "user":
		v, _ = jsonfield.String(r.body, "user")
		if v == "" { // Anthropic: metadata.user_id
			if md, _, _, ok := jsonfield.Find(r.body, "metadata"); ok {
				v, _ = jsonfield.String(md, "user_id")
			}
		}
	case strings.HasPrefix(on, "header:"):
		v = c.Get(on[len("header:"):])
	}
	if v == "" {
		return 0, false
	}
	return route.Hash(v), true
}

func headerOr(h, def string) string {
	if h == "" {
		return def
	}
	return h
}

// Reasons a request, not the gateway's state, is why no step can serve it.
var (
	// what the request asks no target has: a capability, a context
	// window, a region it requires
	unfitReasons = []route.Reason{route.ReasonCapability, route.ReasonContext, route.ReasonRegion}
	// no provider of the model serves the endpoint (count tokens on an
	// OpenAI provider, images on an Anthropic one)
	unsupportedReasons = []route.Reason{route.ReasonUnsupported}
)

// rejectedFor reports whether the route's steps were all rejected for one
// of reasons, inactive and unconfigured steps (and, when reasons do not
// name it, steps of providers without the operation) aside, at least one.
func (r *request) rejectedFor(rte *route.Route, reasons []route.Reason) bool {
	n := 0
	for i := range rte.Steps {
		switch why := r.sel.cur.Reason(i); {
		case slices.Contains(reasons, why):
			n++
		case why == route.ReasonInactive || why == route.ReasonUnavailable || why == route.ReasonUnsupported:
		default:
			return false
		}
	}
	return n > 0
}

// rejections lists the steps the request's selection rejected and why
// ("" when none was).
func (r *request) rejections(rte *route.Route) string {
	var b strings.Builder
	for i := range rte.Steps {
		why := r.sel.cur.Reason(i)
		switch {
		case why == route.Candidate || why == route.ReasonInactive || why == route.ReasonUnavailable || why == route.ReasonUnsupported:
			continue
		case why == route.ReasonFallback && r.sel.cur.Yielded(i):
			continue // offline, yet tried: nothing else could be
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		st := &rte.Steps[i]
		fmt.Fprintf(&b, "%s/%s (%s", st.Provider.Name, st.Model, why)
		switch why {
		case route.ReasonCapability:
			fmt.Fprintf(&b, ": needs %s", strings.Join((r.sel.req.Needs&^st.Caps).Names(), ", "))
		case route.ReasonRegion:
			fmt.Fprintf(&b, ": in %q, required %q", st.Provider.Region, r.sel.req.Region)
		}
		b.WriteByte(')')
	}
	return b.String()
}

// startRoom starts the request's headroom routing (routing.headroom on):
// what it needs of a key's windows, as of now.
func (r *request) startRoom() {
	if !r.rt.cfg.Routing.Headroom.On() {
		return
	}
	sel := &r.sel.req
	r.sel.room = route.Room{Need: headroom.Need{Input: r.use.estIn, Output: sel.MaxOutput}, Now: time.Now().UnixNano()}
	sel.Room = &r.sel.room
}

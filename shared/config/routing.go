package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Routing is the default selection policy: how the targets of a plain model
// name (several providers serve it) and of chains without a strategy of
// their own are ordered, and how requests state a region.
type Routing struct {
	// Strategy is one of Strategies (default priority).
	Strategy string `koanf:"strategy"`
	// HashOn is the request attribute the weighted strategy hashes so that
	// a conversation sticks to one target: client (the gateway key id),
	// user (the body's user field), header:<Name>; "" is smooth weighted
	// round robin.
	HashOn string `koanf:"hash_on"`
	// FailClosed rejects candidates of unknown health (no health record)
	// or missing metadata (no capabilities when the request needs one, no
	// region when it requires one, no price under least_cost or
	// budget_aware), with the reasons in the error.
	FailClosed bool `koanf:"fail_closed"`
	// RegionHeader names the request header that states a preferred
	// region; RegionRequiredHeader the one that, set to true, makes it a
	// requirement.
	RegionHeader         string `koanf:"region_header"`
	RegionRequiredHeader string `koanf:"region_required_header"`
	// Explore is the share of requests (0 to 0.5) that least_latency and
	// health_aware send to the candidate measured least recently, so that
	// a target that slowed down and recovered is noticed.
	Explore *float64 `koanf:"explore"`
	// LatencyAlpha is the weight of a new latency sample in the moving
	// average (0 < alpha <= 1).
	LatencyAlpha float64 `koanf:"latency_alpha"`
	// Headroom is routing by the providers' rate-limit headers.
	Headroom Headroom `koanf:"headroom"`
}

// Headroom is routing by what the providers' rate-limit headers say is
// left of a key's windows: a key (or a model on a key) whose remaining
// requests or tokens cannot fit a request before its reset is skipped
// like a held one.
type Headroom struct {
	// Enabled turns it on (unset: on). Off, the headers are still read
	// (metrics, the admin's view) but routing ignores them.
	Enabled *bool `koanf:"enabled"`
	// MaxWait is the longest a request waits for the earliest reset when
	// no key can fit it (unset: DefaultHeadroomMaxWait; 0: never wait,
	// answer 429 at once).
	MaxWait *time.Duration `koanf:"max_wait"`
}

// On reports whether headroom routing is on.
func (h Headroom) On() bool { return h.Enabled == nil || *h.Enabled }

// Wait is max_wait with its default.
func (h Headroom) Wait() time.Duration {
	if h.MaxWait == nil {
		return DefaultHeadroomMaxWait
	}
	return *h.MaxWait
}

// DefaultHeadroomMaxWait is routing.headroom.max_wait's default.
const DefaultHeadroomMaxWait = 2 * time.Second

// The routing strategies.
const (
	StrategyPriority        = "priority"
	StrategyWeighted        = "weighted"
	StrategyLeastLatency    = "least_latency"
	StrategyLeastCost       = "least_cost"
	StrategyHealthAware     = "health_aware"
	StrategyBudgetAware     = "budget_aware"
	StrategyRegionAffinity  = "region_affinity"
	StrategyCapabilityAware = "capability_aware"
)

// Strategies are the valid values of routing.strategy and
// chains.<name>.strategy.
var Strategies = []string{StrategyPriority, StrategyWeighted, StrategyLeastLatency, StrategyLeastCost,
	StrategyHealthAware, StrategyBudgetAware, StrategyRegionAffinity, StrategyCapabilityAware}

// SelectionLeastLatency orders a provider's keys of equal priority by
// their observed latency.
const SelectionLeastLatency = "least_latency"

// SelectionHeadroom chooses among a provider's keys of equal priority at
// random, weighted by the share of their rate-limit windows left, so that
// load spreads before any key runs dry.
const SelectionHeadroom = "headroom"

// Key priority orders.
const (
	PriorityHighestFirst = "highest_first"
	PriorityLowestFirst  = "lowest_first"
)

// Capabilities a model can declare.
var Capabilities = []string{"tools", "vision", "audio", "json_schema", "reasoning"}

// Routing defaults.
const (
	DefaultRegionHeader         = "X-Switchyard-Region"
	DefaultRegionRequiredHeader = "X-Switchyard-Region-Required"
	DefaultExplore              = 0.02
	DefaultLatencyAlpha         = 0.2
	// MaxSteps is the most targets one model name may resolve to.
	MaxSteps = 64
)

// ExploreShare is routing.explore with its default.
func (r Routing) ExploreShare() float64 {
	if r.Explore == nil {
		return DefaultExplore
	}
	return *r.Explore
}

// IsFailClosed reports whether the chain fails closed (its own setting,
// else the global one).
func (c Chain) IsFailClosed(global bool) bool {
	if c.FailClosed == nil {
		return global
	}
	return *c.FailClosed
}

var (
	regionRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	headerRE = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
)

// hashOn checks a hash_on value: "", client, user or header:<Name>.
func (v *validator) hashOn(path, h string) {
	switch {
	case h == "" || h == "client" || h == "user":
	case strings.HasPrefix(h, "header:"):
		if name := strings.TrimPrefix(h, "header:"); !headerRE.MatchString(name) {
			v.add(path, "%q: want header:<Name> with a valid header name", h)
		}
	default:
		v.add(path, "unknown value %q (want client, user or header:<Name>)", h)
	}
}

func (v *validator) region(path, r string) {
	if r != "" && !regionRE.MatchString(r) {
		v.add(path, "%q must match %s", r, regionRE)
	}
}

func (v *validator) routing() {
	r := v.cfg.Routing
	if r.Strategy != "" {
		v.oneOf("routing.strategy", r.Strategy, Strategies...)
	}
	v.hashOn("routing.hash_on", r.HashOn)
	for path, h := range map[string]string{"routing.region_header": r.RegionHeader, "routing.region_required_header": r.RegionRequiredHeader} {
		if h != "" && !headerRE.MatchString(h) {
			v.add(path, "%q is not a valid header name", h)
		}
	}
	if e := r.Explore; e != nil && (*e < 0 || *e > 0.5) {
		v.add("routing.explore", "must be from 0 to 0.5, got %g", *e)
	}
	if w := r.Headroom.Wait(); w < 0 {
		v.add("routing.headroom.max_wait", "must not be negative, got %s", w)
	}
	if a := r.LatencyAlpha; a < 0 || a > 1 {
		v.add("routing.latency_alpha", "must be above 0 and at most 1 (unset: %g), got %g", DefaultLatencyAlpha, a)
	}
	for _, name := range sortedKeys(v.cfg.Chains) {
		c, at := v.cfg.Chains[name], "chains."+name
		if c.Strategy != "" {
			v.oneOf(at+".strategy", c.Strategy, Strategies...)
		}
		v.hashOn(at+".hash_on", c.HashOn)
		v.region(at+".region", c.Region)
		if len(c.Steps) > MaxSteps {
			v.add(at+".steps", "%d steps, at most %d", len(c.Steps), MaxSteps)
		}
		for i, s := range c.Steps {
			if s.Weight < 0 {
				v.add(fmt.Sprintf("%s.steps[%d].weight", at, i), "must be >= 1 (unset: 1), got %d", s.Weight)
			}
		}
	}
	for i, cl := range v.cfg.Clients {
		at := fmt.Sprintf("clients[%d]", i)
		v.region(at+".region", cl.Region)
		if cl.RegionRequired && cl.Region == "" {
			v.add(at+".region_required", "is true but clients[%d].region is not set", i)
		}
	}
}

// providerRouting checks a provider's routing settings and its models'
// metadata.
func (v *validator) providerRouting(at string, p Provider) {
	if p.Selection != "" {
		v.oneOf(at+".selection", p.Selection, SelectionRoundRobin, SelectionWeighted, SelectionLeastLatency, SelectionHeadroom)
	}
	v.hashOn(at+".hash_on", p.HashOn)
	if p.PriorityOrder != "" {
		v.oneOf(at+".priority_order", p.PriorityOrder, PriorityHighestFirst, PriorityLowestFirst)
	}
	v.region(at+".region", p.Region)
	v.budget(at+".budget", p.Budget)
	for j, m := range p.Models {
		mat := fmt.Sprintf("%s.models[%d]", at, j)
		for k, c := range m.Capabilities {
			if !slices.Contains(Capabilities, c) {
				v.add(fmt.Sprintf("%s.capabilities[%d]", mat, k), "unknown capability %q (want one of: %s)", c, strings.Join(Capabilities, ", "))
			}
		}
		if m.ContextWindow < 0 {
			v.add(mat+".context_window", "must be >= 0, got %d", m.ContextWindow)
		}
		if m.MaxOutput < 0 {
			v.add(mat+".max_output", "must be >= 0, got %d", m.MaxOutput)
		}
	}
}

package route

// What a route's policy is made of: the strategies, Policy, a provider's
// Health as routing reads it, and model capabilities (Caps).

import (
	"slices"
	"strings"

	"switchyard.dev/shared/config"
)

// Strategy orders a route's steps.
type Strategy uint8

// The strategies (config.Strategies).
const (
	Priority Strategy = iota
	Weighted
	LeastLatency
	LeastCost
	HealthAware
	BudgetAware
	RegionAffinity
	CapabilityAware
)

var strategyNames = [...]string{
	Priority: config.StrategyPriority, Weighted: config.StrategyWeighted, LeastLatency: config.StrategyLeastLatency,
	LeastCost: config.StrategyLeastCost, HealthAware: config.StrategyHealthAware, BudgetAware: config.StrategyBudgetAware,
	RegionAffinity: config.StrategyRegionAffinity, CapabilityAware: config.StrategyCapabilityAware,
}

func (s Strategy) String() string { return strategyNames[s] }

// ParseStrategy reads a config strategy name ("" is priority).
func ParseStrategy(name string) (Strategy, bool) {
	if name == "" {
		return Priority, true
	}
	i := slices.Index(strategyNames[:], name)
	return Strategy(max(i, 0)), i >= 0
}

// Policy is how a route orders its steps.
type Policy struct {
	Strategy Strategy
	// HashOn is the attribute the weighted strategy hashes ("" for smooth
	// weighted round robin): client, user or header:<Name>.
	HashOn string
	// Region is the region region_affinity prefers when the request names
	// none.
	Region string
	// FailClosed rejects candidates of unknown health or missing metadata.
	FailClosed bool
}

// HashHeader is the header HashOn names ("" when it names none).
func (p *Policy) HashHeader() string {
	h, _ := strings.CutPrefix(p.HashOn, "header:")
	if h == p.HashOn {
		return ""
	}
	return h
}

// Health is a provider's health as routing reads it.
type Health uint8

// The health states.
const (
	HealthUnknown Health = iota // no record, or the record says unknown
	HealthHealthy
	HealthDegraded
	HealthOffline // unhealthy, or its circuit is open
)

var healthNames = [...]string{"unknown", "healthy", "degraded", "offline"}

func (h Health) String() string { return healthNames[h] }

// Caps is a set of model capabilities.
type Caps uint8

// The capabilities (config.Capabilities).
const (
	CapTools Caps = 1 << iota
	CapVision
	CapAudio
	CapJSONSchema
	CapReasoning
)

// ParseCaps reads config capability names (unknown names are ignored:
// validation refused them).
func ParseCaps(names []string) Caps {
	var c Caps
	for _, n := range names {
		if i := slices.Index(config.Capabilities, n); i >= 0 {
			c |= 1 << i
		}
	}
	return c
}

// Names lists the capabilities of c.
func (c Caps) Names() []string {
	var out []string
	for i, n := range config.Capabilities {
		if c&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

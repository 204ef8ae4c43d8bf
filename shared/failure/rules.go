package failure

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Rule is one operator trip_on rule: when Match finds the failure's code or
// message, the failure gets Class (and a hold of TTL, when TTL > 0)
// whatever the built-in classifier says.
type Rule struct {
	Name  string
	Match *regexp.Regexp
	Class Class
	TTL   time.Duration
}

// ErrInvalidRule is wrapped by every CompileRule error.
var ErrInvalidRule = errors.New("invalid trip_on rule")

// CompileRule builds a rule from its configured text. The pattern is
// matched case-insensitively; ttl is a Go duration ("10m", "1h30m") or
// empty for "use the class's ladder". Errors name the rule.
func CompileRule(name, match, class, ttl string) (Rule, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return Rule{}, fmt.Errorf("%w: a rule needs a name", ErrInvalidRule)
	}
	if strings.TrimSpace(match) == "" {
		return Rule{}, fmt.Errorf("%w %q: match is empty", ErrInvalidRule, name)
	}
	re, err := regexp.Compile("(?i)" + match)
	if err != nil {
		return Rule{}, fmt.Errorf("%w %q: match: %w", ErrInvalidRule, name, err)
	}
	c, err := ParseClass(class)
	if err != nil {
		return Rule{}, fmt.Errorf("%w %q: class: %w", ErrInvalidRule, name, err)
	}
	var d time.Duration
	if ttl = strings.TrimSpace(ttl); ttl != "" {
		d, err = time.ParseDuration(ttl)
		if err != nil {
			return Rule{}, fmt.Errorf("%w %q: ttl: %w", ErrInvalidRule, name, err)
		}
		if d < 0 {
			return Rule{}, fmt.Errorf("%w %q: ttl %s is negative", ErrInvalidRule, name, ttl)
		}
	}
	return Rule{Name: name, Match: re, Class: c, TTL: d}, nil
}

// matches reports whether the rule finds any of the texts.
func (r Rule) matches(texts []string) bool {
	if r.Match == nil {
		return false
	}
	for _, t := range texts {
		if t != "" && r.Match.MatchString(t) {
			return true
		}
	}
	return false
}

// RulesFromEnv reads global trip_on rules from environment entries
// ("KEY=value", as os.Environ returns them):
//
//	SWITCHYARD_TRIP_<NAME>_MATCH  regex (required)
//	SWITCHYARD_TRIP_<NAME>_CLASS  class name (required)
//	SWITCHYARD_TRIP_<NAME>_TTL    Go duration (optional)
//
// <NAME> becomes the rule's name in lower case. Rules come back sorted by
// name.
func RulesFromEnv(environ []string) ([]Rule, error) {
	const prefix = "SWITCHYARD_TRIP_"
	type parts struct{ match, class, ttl string }
	byName := map[string]*parts{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, prefix) {
			continue
		}
		rest := k[len(prefix):]
		i := strings.LastIndexByte(rest, '_')
		if i <= 0 {
			continue
		}
		name, field := strings.ToLower(rest[:i]), rest[i+1:]
		p := byName[name]
		if p == nil {
			p = &parts{}
			byName[name] = p
		}
		switch field {
		case "MATCH":
			p.match = v
		case "CLASS":
			p.class = v
		case "TTL":
			p.ttl = v
		default:
			return nil, fmt.Errorf("%w %q: unknown variable %s (want _MATCH, _CLASS or _TTL)", ErrInvalidRule, name, k)
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	rules := make([]Rule, 0, len(names))
	for _, n := range names {
		p := byName[n]
		r, err := CompileRule(n, p.match, p.class, p.ttl)
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// Classifier classifies with operator rules on top of the built-in
// classifier. A provider with an entry in PerProvider uses that set instead
// of Global (an empty entry switches the global rules off for it). The zero
// value classifies like Classify.
type Classifier struct {
	Global      []Rule
	PerProvider map[string][]Rule
	// Now is the clock for stated waits; nil means time.Now.
	Now func() time.Time
}

// RulesFor returns the rule set that applies to a provider (by configured
// name).
func (c *Classifier) RulesFor(providerName string) []Rule {
	if rs, ok := c.PerProvider[providerName]; ok {
		return rs
	}
	return c.Global
}

// Classify classifies in, then applies the first matching rule of the
// provider's set: the rule decides the class (scope follows the class), and
// sets Rule and HoldTTL. Stated waits and the provider code are kept.
func (c *Classifier) Classify(in Input, providerName string) Result {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	res, sig := classify(in, now())
	rules := c.RulesFor(providerName)
	if len(rules) == 0 {
		return res
	}
	texts := ruleTexts(res, sig)
	for _, r := range rules {
		if !r.matches(texts) {
			continue
		}
		if r.Class != res.Class {
			res.Scope = r.Class.DefaultScope()
		}
		res.Class = r.Class
		res.KeyDependent = res.KeyDependent && r.Class == RequestRejected // the rule's class acts as it says
		res.Rule = r.Name
		res.HoldTTL = r.TTL
		res.Reason = "trip_on rule " + r.Name + " (built-in: " + res.Reason + ")"
		if r.Class == RequestRejected {
			res.RetryAfter, res.HasWait = 0, false
		}
		return res
	}
	return res
}

// ruleTexts are what a rule's regex is tried on, each on its own: the codes
// and the message of every layer, and the result's code.
func ruleTexts(res Result, sig *signal) []string {
	texts := []string{res.Code}
	for _, l := range sig.layers() {
		texts = append(texts, l.codes()...)
		texts = append(texts, l.message)
	}
	return texts
}

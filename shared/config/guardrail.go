package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"switchyard.dev/shared/guardrail"
)

// Guardrail is one check of what a request sends upstream, by name
// (guardrails[]), attached to routes (chains.<name>.guardrails,
// providers[].models[].guardrails), plans and clients. Its checks are
// patterns (built-ins, regular expressions, deny words), limits and
// tools; Action says what a match does.
type Guardrail struct {
	Name string `koanf:"name"`
	// Action is block (default), redact (patterns only) or warn.
	Action string `koanf:"action"`
	// Stage is what it checks: input (default: what a request sends
	// upstream), output (what an answer brings back) or both.
	Stage string `koanf:"stage"`
	// Patterns are named built-ins: email, phone, card_number, iban,
	// provider_key, jwt.
	Patterns []string `koanf:"patterns"`
	// Regex are RE2 regular expressions (Go's regexp syntax).
	Regex []string `koanf:"regex"`
	// Deny are words or phrases, matched case-insensitively on word
	// boundaries.
	Deny []string `koanf:"deny"`
	// Replacement replaces a redacted match; "{pattern}" names what
	// matched. Default "[REDACTED:{pattern}]".
	Replacement string `koanf:"replacement"`
	// Limits bound the request (input stage).
	Limits GuardrailLimits `koanf:"limits"`
	// Tools bound the tools a request may offer (input stage).
	Tools GuardrailTools `koanf:"tools"`
	// Moderation asks a moderation model, through the gateway's own
	// pipeline, whether the text is flagged.
	Moderation GuardrailModeration `koanf:"moderation"`
	// Webhook asks an endpoint of the operator's.
	Webhook GuardrailWebhook `koanf:"webhook"`
}

// GuardrailModeration is a guardrail's moderation check: the text goes to
// Model (a model of kind moderation the gateway routes: provider/model or
// an alias of one) as a moderations request, served like any other (keys,
// holds, failover, metering, under the caller's client key); a flagged
// answer is a match.
type GuardrailModeration struct {
	Model string `koanf:"model"`
	// Categories are the categories that count (empty: any the model
	// flags).
	Categories []string `koanf:"categories"`
	// Threshold, when set, counts a category whose score is at least it,
	// flagged or not (0: the model's flags).
	Threshold float64 `koanf:"threshold"`
	// Timeout bounds the call (default 2s).
	Timeout time.Duration `koanf:"timeout"`
	// OnError is what a failed or late call does: allow (default) or
	// block.
	OnError string `koanf:"on_error"`
}

// GuardrailWebhook is a guardrail's webhook check: the text goes to URL
// (POST, JSON, signed with Secret), whose answer says pass or fail.
type GuardrailWebhook struct {
	URL string `koanf:"url"`
	// Secret signs each call (HMAC-SHA256, X-Switchyard-Signature);
	// env:NAME or file:PATH.
	Secret SecretRef `koanf:"secret"`
	// Value is the resolved secret, filled in by Load.
	Value Secret `koanf:"-"`
	// Timeout bounds the call (default 2s).
	Timeout time.Duration `koanf:"timeout"`
	// OnError is what a failed or late call, or an answer that is not
	// one, does: allow (default) or block.
	OnError string `koanf:"on_error"`
}

// On reports whether the guardrail has a moderation check.
func (m *GuardrailModeration) On() bool { return m.Model != "" }

// On reports whether the guardrail has a webhook check.
func (w *GuardrailWebhook) On() bool { return w.URL != "" }

// Remote-check defaults and on_error values.
const (
	DefaultCheckTimeout = 2 * time.Second
	OnErrorAllow        = "allow"
	OnErrorBlock        = "block"
)

// CheckTimeout is t, or DefaultCheckTimeout when unset.
func CheckTimeout(t time.Duration) time.Duration {
	if t <= 0 {
		return DefaultCheckTimeout
	}
	return t
}

// HasRemote reports whether the guardrail calls out (moderation or
// webhook).
func (g *Guardrail) HasRemote() bool { return g.Moderation.On() || g.Webhook.On() }

// GuardrailLimits bound a request's size (0: no bound).
type GuardrailLimits struct {
	InputTokens     int `koanf:"input_tokens"`
	Messages        int `koanf:"messages"`
	Attachments     int `koanf:"attachments"`
	AttachmentBytes int `koanf:"attachment_bytes"`
}

// GuardrailTools bound a request's tools: Allow lists the tool names it
// may offer (empty: any), DenyParams the request parameters it may not
// set (logit_bias, say).
type GuardrailTools struct {
	Allow      []string `koanf:"allow"`
	DenyParams []string `koanf:"deny_params"`
}

// Guardrail actions.
const (
	ActionBlock  = "block"
	ActionRedact = "redact"
	ActionWarn   = "warn"
)

// Guardrail stages.
const (
	StageInput  = "input"
	StageOutput = "output"
	StageBoth   = "both"
)

// Checks reports whether the guardrail runs at stage (StageInput or
// StageOutput).
func (g *Guardrail) Checks(stage string) bool {
	switch g.Stage {
	case "", StageInput:
		return stage == StageInput
	case StageBoth:
		return true
	}
	return g.Stage == stage
}

// GuardrailBuiltins are the built-in patterns' names.
var GuardrailBuiltins = []string{"email", "phone", "card_number", "iban", "provider_key", "jwt"}

// ActionOf is the guardrail's action, block when unset.
func (g *Guardrail) ActionOf() string {
	if g.Action == "" {
		return ActionBlock
	}
	return g.Action
}

// HasPatterns reports whether the guardrail checks patterns.
func (g *Guardrail) HasPatterns() bool {
	return len(g.Patterns)+len(g.Regex)+len(g.Deny) > 0
}

// Attachment is one entry of a guardrails list of a route, plan or client:
// "name" attaches the guardrail, "name:action" attaches it with another
// action, "!name" detaches one a less specific level attached.
type Attachment struct {
	Name   string
	Action string // "": the guardrail's own
	Off    bool
	// Level is, in Effective's result, the index of the level (the list)
	// that last named it: 0 the route, 1 the plan, 2 the client key.
	Level int
}

// ParseAttachment reads one entry of a guardrails list.
func ParseAttachment(s string) (Attachment, error) {
	if name, ok := strings.CutPrefix(s, "!"); ok {
		if name == "" {
			return Attachment{}, fmt.Errorf("%q names no guardrail", s)
		}
		return Attachment{Name: name, Off: true}, nil
	}
	name, action, _ := strings.Cut(s, ":")
	if name == "" {
		return Attachment{}, fmt.Errorf("%q names no guardrail", s)
	}
	switch action {
	case "", ActionBlock, ActionRedact, ActionWarn:
	default:
		return Attachment{}, fmt.Errorf("%q: unknown action %q (want block, redact or warn)", s, action)
	}
	return Attachment{Name: name, Action: action}, nil
}

// Effective is the guardrails a request runs, in order, by name with the
// action in force: the route's list, then the plan's and then the
// client's applied over it (the most specific wins: a later level may
// change an attached guardrail's action or detach it with "!name").
// Entries are assumed valid (Validate).
func Effective(levels ...[]string) []Attachment { return AppendEffective(nil, levels...) }

// AppendEffective is Effective appended to dst[:0] (its array reused).
func AppendEffective(dst []Attachment, levels ...[]string) []Attachment {
	out := dst[:0]
	for level, list := range levels {
		for _, s := range list {
			a, err := ParseAttachment(s)
			if err != nil {
				continue
			}
			i := 0
			for i < len(out) && out[i].Name != a.Name {
				i++
			}
			a.Level = level
			switch {
			case a.Off && i < len(out):
				out = append(out[:i], out[i+1:]...)
			case a.Off:
			case i < len(out):
				out[i].Action, out[i].Level = a.Action, level
			default:
				out = append(out, a)
			}
		}
	}
	return out
}

// Guardrail returns the guardrail named name (nil: none).
func (c *Config) Guardrail(name string) *Guardrail {
	for i := range c.Guardrails {
		if c.Guardrails[i].Name == name {
			return &c.Guardrails[i]
		}
	}
	return nil
}

func (v *validator) guardrails() {
	names := map[string]bool{}
	for i := range v.cfg.Guardrails {
		g := &v.cfg.Guardrails[i]
		at := fmt.Sprintf("guardrails[%d]", i)
		switch {
		case g.Name == "":
			v.add(at+".name", "must be set")
		case !idRE.MatchString(g.Name):
			v.add(at+".name", "%q must match %s", g.Name, idRE)
		case names[g.Name]:
			v.add(at+".name", "%q is defined twice", g.Name)
		}
		names[g.Name] = true
		v.oneOf(at+".action", g.ActionOf(), ActionBlock, ActionRedact, ActionWarn)
		if g.Stage != "" {
			v.oneOf(at+".stage", g.Stage, StageInput, StageOutput, StageBoth)
		}
		if g.Stage == StageOutput && (g.Limits != (GuardrailLimits{}) || len(g.Tools.Allow)+len(g.Tools.DenyParams) > 0) {
			v.add(at+".stage", "limits and tools bound requests: they check the input stage, not output")
		}
		v.guardrailChecks(at, g)
	}
	attach := func(path string, list []string) {
		for j, s := range list {
			a, err := ParseAttachment(s)
			switch {
			case err != nil:
				v.add(fmt.Sprintf("%s[%d]", path, j), "%v", err)
			case !names[a.Name]:
				v.add(fmt.Sprintf("%s[%d]", path, j), "no guardrail named %q (guardrails[].name)", a.Name)
			case a.Action == ActionRedact && !v.cfg.Guardrail(a.Name).HasPatterns():
				v.add(fmt.Sprintf("%s[%d]", path, j), "redact needs patterns, and guardrail %q has none", a.Name)
			case a.Action == ActionRedact && v.cfg.Guardrail(a.Name).HasRemote():
				v.add(fmt.Sprintf("%s[%d]", path, j), "guardrail %q: %s", a.Name, redactRemote)
			}
		}
	}
	for name, ch := range v.cfg.Chains {
		attach("chains."+name+".guardrails", ch.Guardrails)
	}
	for i, p := range v.cfg.Providers {
		for j, m := range p.Models {
			attach(fmt.Sprintf("providers[%d].models[%d].guardrails", i, j), m.Guardrails)
		}
	}
	for name, p := range v.cfg.Plans {
		attach("plans."+name+".guardrails", p.Guardrails)
	}
	for i, cl := range v.cfg.Clients {
		attach(fmt.Sprintf("clients[%d].guardrails", i), cl.Guardrails)
	}
}

// guardrailChecks validates what a guardrail checks.
func (v *validator) guardrailChecks(at string, g *Guardrail) {
	for j, p := range g.Patterns {
		if !contains(GuardrailBuiltins, p) {
			v.add(fmt.Sprintf("%s.patterns[%d]", at, j), "unknown built-in %q (known: %s)", p, strings.Join(GuardrailBuiltins, ", "))
		}
	}
	for j, re := range g.Regex {
		if err := guardrail.CheckRegex(re); err != nil {
			v.add(fmt.Sprintf("%s.regex[%d]", at, j), "%v", err)
		}
	}
	for j, w := range g.Deny {
		if strings.TrimSpace(w) == "" {
			v.add(fmt.Sprintf("%s.deny[%d]", at, j), "must not be empty")
		}
	}
	l := g.Limits
	for key, n := range map[string]int{"input_tokens": l.InputTokens, "messages": l.Messages,
		"attachments": l.Attachments, "attachment_bytes": l.AttachmentBytes} {
		if n < 0 {
			v.add(at+".limits."+key, "must be >= 0 (0: no bound), got %d", n)
		}
	}
	v.moderation(at+".moderation", &g.Moderation)
	v.webhook(at+".webhook", &g.Webhook)
	checks := g.HasPatterns() || l != (GuardrailLimits{}) || len(g.Tools.Allow)+len(g.Tools.DenyParams) > 0 || g.HasRemote()
	switch {
	case !checks:
		v.add(at, "guardrail %q checks nothing: set patterns, regex, deny, limits, tools, moderation or webhook", g.Name)
	case g.ActionOf() == ActionRedact && !g.HasPatterns():
		v.add(at+".action", "redact needs patterns, regex or deny to replace")
	case g.ActionOf() == ActionRedact && g.HasRemote():
		v.add(at+".action", "%s", redactRemote)
	}
}

// redactRemote is why a guardrail that calls out does not redact.
const redactRemote = "redact replaces what patterns match; a moderation or webhook check finds no span to replace: it blocks or warns (give the patterns a guardrail of their own)"

// moderation validates a guardrail's moderation check.
func (v *validator) moderation(at string, m *GuardrailModeration) {
	if !m.On() {
		if m.Timeout != 0 || m.OnError != "" || len(m.Categories) > 0 || m.Threshold != 0 {
			v.add(at+".model", "must be set (a model of kind moderation: provider/model or an alias of one)")
		}
		return
	}
	v.modelOfKind(at+".model", m.Model, KindModeration, "a moderation check")
	for j, c := range m.Categories {
		if strings.TrimSpace(c) == "" {
			v.add(fmt.Sprintf("%s.categories[%d]", at, j), "must not be empty")
		}
	}
	if m.Threshold < 0 || m.Threshold > 1 {
		v.add(at+".threshold", "must be between 0 and 1 (a category score), got %v", m.Threshold)
	}
	v.remoteCheck(at, m.Timeout, m.OnError)
}

// webhook validates a guardrail's webhook check.
func (v *validator) webhook(at string, w *GuardrailWebhook) {
	if !w.On() {
		if w.Secret != "" || w.Timeout != 0 || w.OnError != "" {
			v.add(at+".url", "must be set (http:// or https://)")
		}
		return
	}
	if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add(at+".url", "%q: want an absolute http:// or https:// URL", w.URL)
	} else if u.User != nil {
		v.add(at+".url", "must not carry credentials (the calls are signed with secret)")
	}
	v.secretRef(at+".secret", w.Secret, true)
	v.remoteCheck(at, w.Timeout, w.OnError)
}

func (v *validator) remoteCheck(at string, timeout time.Duration, onError string) {
	if timeout < 0 {
		v.add(at+".timeout", "must be >= 0 (0: %s), got %s", DefaultCheckTimeout, timeout)
	}
	if onError != "" {
		v.oneOf(at+".on_error", onError, OnErrorAllow, OnErrorBlock)
	}
}

// modelOfKind checks that model (provider/model or an alias of one) is a
// configured model of kind, as what needs it.
func (v *validator) modelOfKind(path, model, kind, what string) {
	target := model
	if t, ok := v.cfg.Aliases[target]; ok {
		target = t
	}
	p, name, ok := SplitTarget(target)
	switch {
	case !ok:
		v.add(path, "%q is neither provider/model nor an alias of one", model)
	case !v.models[p][name]:
		v.target(path, target)
	default:
		if k := v.cfg.modelKind(p, name); k != kind {
			v.add(path, "%q is a model of kind %q; %s needs kind %q", model, k, what, kind)
		}
	}
}

// modelKind is the kind of provider p's model m ("" when unknown).
func (c *Config) modelKind(p, m string) string {
	for i := range c.Providers {
		if c.Providers[i].Name != p {
			continue
		}
		for _, x := range c.Providers[i].Models {
			if x.Name == m {
				if x.Kind == "" {
					return DefaultModelKind
				}
				return x.Kind
			}
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

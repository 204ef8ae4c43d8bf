package guard

import (
	"fmt"
	"strings"
	"time"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/guardrail"
)

// Set is the guardrails of one routing version, compiled once: their
// patterns in one matcher, their limits and tool rules, and the lists each
// route attaches.
type Set struct {
	defs    []*config.Guardrail
	index   map[string]int // by name
	matcher *guardrail.Matcher
	// routes are the guardrails each route attaches, by route name
	// (chain:<name> from chains.<name>.guardrails; a model route from
	// its models' providers[].models[].guardrails).
	routes map[string][]string
	// output: some guardrail checks the output stage; input: some the
	// input stage
	output, input bool
}

// Compile builds the Set of cfg (validated: every name an attachment
// uses exists) for the routes of table: a chain's guardrails are
// chains.<name>.guardrails, a model route's those of the models it
// serves (providers[].models[].guardrails).
func Compile(cfg *config.Config, table *route.Table) (*Set, error) {
	s := &Set{index: map[string]int{}, routes: map[string][]string{}}
	defs := make([]guardrail.Def, len(cfg.Guardrails))
	for i := range cfg.Guardrails {
		g := &cfg.Guardrails[i]
		s.defs = append(s.defs, g)
		s.index[g.Name] = i
		defs[i] = guardrail.Def{Name: g.Name, Builtins: g.Patterns, Regex: g.Regex, Deny: g.Deny}
		s.output = s.output || g.Checks(config.StageOutput)
		s.input = s.input || g.Checks(config.StageInput)
	}
	if len(defs) == 0 {
		return s, nil
	}
	m, err := guardrail.Compile(defs)
	if err != nil {
		return nil, err
	}
	s.matcher = m
	for _, n := range table.Names {
		rte, ok := table.Resolve(n.ID)
		if !ok || s.routes[rte.Name] != nil {
			continue
		}
		var list []string
		if chain, ok := strings.CutPrefix(rte.Name, "chain:"); ok {
			list = cfg.Chains[chain].Guardrails
		} else {
			for _, st := range rte.Steps {
				if st.Provider != nil {
					list = append(list, modelGuardrails(cfg, st.Provider.Name, st.Model)...)
				}
			}
		}
		if len(list) > 0 {
			s.routes[rte.Name] = list
		}
	}
	return s, nil
}

// modelGuardrails is providers[].models[].guardrails of provider's model.
func modelGuardrails(cfg *config.Config, provider, model string) []string {
	if p := cfg.Provider(provider); p != nil {
		for _, mc := range p.Models {
			if mc.Name == model {
				return mc.Guardrails
			}
		}
	}
	return nil
}

// Decision is what one guardrail decided on one request, for the debug
// bundle and the metrics: never the matched text.
type Decision struct {
	Guardrail string        `json:"guardrail"`
	Action    string        `json:"action"`          // block, redact or warn, as attached
	Verdict   string        `json:"verdict"`         // pass, or the action taken
	Check     string        `json:"check,omitempty"` // what matched: a pattern's name, limits.messages, tools.allow ...
	Took      time.Duration `json:"took_ns"`
}

// Verdicts of a Decision.
const (
	VerdictPass = "pass"
)

// Result is what a request's guardrails decided: the decisions in order,
// the guardrail that blocked it (nil: none), and the body to send when
// one redacted it (nil: the body as it came).
type Result struct {
	Decisions []Decision
	Blocked   *Decision
	Body      []byte
	// Remote are the guardrails whose moderation or webhook check is
	// still to run (their local checks found nothing), in order: the
	// caller runs them on Body (or the request's body) and decides
	// (Remote.Decide).
	Remote []Remote
}

// Remote is a guardrail's check that calls out (moderation, webhook),
// with the action in force.
type Remote struct {
	Guardrail *config.Guardrail
	Action    string
}

// Decide is the decision of a remote check that found check ("": it
// passed) in took; failed says the call failed (check then names the
// failure, the guardrail's on_error decides).
func (rm *Remote) Decide(check string, failed bool, onError string, took time.Duration) Decision {
	d := Decision{Guardrail: rm.Guardrail.Name, Action: rm.Action, Verdict: VerdictPass, Check: check, Took: took}
	switch {
	case failed && onError == config.OnErrorBlock:
		d.Verdict = config.ActionBlock
	case failed:
	case check != "":
		d.Verdict = rm.Action
	}
	return d
}

// Request is what the guardrails read of one request.
type Request struct {
	RouteName    string   // the route's attachments (from the Set)
	Plan, Client []string // the plan's and the client key's guardrails lists
	Body         []byte
	Format       Format
	InputTokens  int64 // the gateway's estimate
	Texts        *Texts
	// Output: the body is an answer (Format one of the answer formats)
	// and the output stage's guardrails check it.
	Output bool
}

// stage is the request's stage's name.
func (q *Request) stage() string {
	if q.Output {
		return config.StageOutput
	}
	return config.StageInput
}

// Active reports whether any guardrail applies to the request: none runs
// (and nothing is read) on a route, plan and client without guardrails.
func (s *Set) Active(q *Request) bool {
	if s == nil || s.matcher == nil || (q.Output && !s.output) || (!q.Output && !s.input) {
		return false
	}
	return len(q.Plan)+len(q.Client) > 0 || len(s.routes[q.RouteName]) > 0
}

// attached is the guardrails the request runs at its stage, in order,
// with their index and the action in force; *eff is the buffer their
// list is made in.
func (s *Set) attached(q *Request, eff *[]config.Attachment, fn func(i int, g *config.Guardrail, action string)) {
	stage := q.stage()
	*eff = config.AppendEffective(*eff, s.routes[q.RouteName], q.Plan, q.Client)
	for _, a := range *eff {
		i, ok := s.index[a.Name]
		if !ok || !s.defs[i].Checks(stage) {
			continue
		}
		action := a.Action
		if action == "" {
			action = s.defs[i].ActionOf()
		}
		fn(i, s.defs[i], action)
	}
}

// Attachments are the guardrails q's route, plan and client attach, at
// either stage, in the order they run, each with the action in force
// (the guardrail's own when the lists set none) and the level that set
// it (config.Attachment.Level). For the policy trace: it allocates.
func (s *Set) Attachments(q *Request) []config.Attachment {
	if s == nil {
		return nil
	}
	out := config.Effective(s.routes[q.RouteName], q.Plan, q.Client)
	for i := range out {
		if j, ok := s.index[out[i].Name]; ok && out[i].Action == "" {
			out[i].Action = s.defs[j].ActionOf()
		}
	}
	return out
}

// Check runs the request's guardrails in order (route, then plan, then
// client: see config.Effective). The first that blocks ends the check;
// redactions apply in turn to the text the next guardrails read. The
// text is scanned once for every guardrail's patterns, and again only
// after a redaction changed it. The result's decisions live in q.Texts:
// they are valid until its next use.
func (s *Set) Check(q *Request) Result {
	tx := q.Texts
	res := Result{Decisions: tx.decisions[:0]}
	body := q.Body
	var found []string // per guardrail: the first pattern found in body ("": none)
	done := false
	s.attached(q, &tx.eff, func(i int, g *config.Guardrail, action string) {
		if done {
			return
		}
		start := time.Now()
		d := Decision{Guardrail: g.Name, Action: action, Verdict: VerdictPass}
		check := ""
		if !q.Output {
			check = s.shapeCheck(g, body, q)
		}
		if check == "" && g.HasPatterns() {
			if found == nil {
				found = s.scan(body, q)
			}
			check = found[i]
		}
		if check == "" && g.HasRemote() {
			res.Remote = append(res.Remote, Remote{Guardrail: g, Action: action})
			return // decided once the call answers
		}
		switch {
		case check == "":
		case check == textsTooMany:
			d.Verdict, d.Check = config.ActionBlock, check // unread text is not let through, whatever the action
		case action == config.ActionRedact && !isShapeCheck(check):
			q.Texts.Reset(body, q.Format)
			body = s.redact(i, g, q.Texts)
			res.Body, found = body, nil // the text changed: scanned again for the next guardrail
			d.Verdict, d.Check = config.ActionRedact, check
		default:
			d.Verdict, d.Check = action, check
		}
		d.Took = time.Since(start)
		res.Decisions = append(res.Decisions, d)
		if d.Verdict == config.ActionBlock {
			res.Blocked = &res.Decisions[len(res.Decisions)-1]
			done = true
		}
	})
	tx.decisions = res.Decisions
	return res
}

// textsTooMany is the check of a body with more text values than are
// read: a pattern guardrail does not let it through unchecked.
const textsTooMany = "texts.too_many"

// isShapeCheck reports whether check is one of shapeCheck's (limits,
// tools): those block or warn, there is nothing to redact.
func isShapeCheck(check string) bool {
	return strings.HasPrefix(check, "limits.") || strings.HasPrefix(check, "tools.")
}

// scan reads body's text once for every guardrail's patterns: per
// guardrail, the first pattern found ("" none; textsTooMany when nothing
// was found in a body whose text was cut).
func (s *Set) scan(body []byte, q *Request) []string {
	tx := q.Texts
	found := append(tx.found[:0], make([]string, len(s.defs))...)
	tx.found = found
	tx.Reset(body, q.Format)
	for j := range tx.Len() {
		tx.ms = s.matcher.Scan(tx.Text(j), tx.ms[:0])
		for _, m := range tx.ms {
			if found[m.Guardrail] == "" {
				found[m.Guardrail] = m.Pattern
			}
		}
	}
	if tx.Cut() {
		for i := range found {
			if found[i] == "" {
				found[i] = textsTooMany
			}
		}
	}
	return found
}

// redact rewrites the request's text with guardrail i's matches replaced.
func (s *Set) redact(i int, g *config.Guardrail, tx *Texts) []byte {
	var ms []guardrail.Match
	var buf []byte
	return tx.Rewrite(nil, func(_ int, text []byte) ([]byte, bool) {
		ms = s.matcher.Scan(text, ms[:0])
		own := ms[:0]
		for _, m := range ms {
			if m.Guardrail == i {
				own = append(own, m)
			}
		}
		if len(own) == 0 {
			return nil, false
		}
		buf = s.matcher.Replace(buf[:0], text, own, func(m guardrail.Match) []byte { return replacement(g, m, s.matcher) })
		return buf, true
	})
}

// replacement is what replaces a match of g.
func replacement(g *config.Guardrail, m guardrail.Match, mt *guardrail.Matcher) []byte {
	if g.Replacement == "" {
		return mt.Label(m)
	}
	return []byte(strings.ReplaceAll(g.Replacement, "{pattern}", m.Pattern))
}

// shapeCheck checks g's limits and tool rules: the first broken ("" none).
func (s *Set) shapeCheck(g *config.Guardrail, body []byte, q *Request) string {
	l, tl := g.Limits, g.Tools
	if l == (config.GuardrailLimits{}) && len(tl.Allow)+len(tl.DenyParams) == 0 {
		return ""
	}
	if l.InputTokens > 0 && q.InputTokens > int64(l.InputTokens) {
		return "limits.input_tokens"
	}
	sh := ShapeOf(body, q.Format)
	switch {
	case l.Messages > 0 && sh.Messages > l.Messages:
		return "limits.messages"
	case l.Attachments > 0 && sh.Attachments > l.Attachments:
		return "limits.attachments"
	case l.AttachmentBytes > 0 && sh.LargestAttachment > l.AttachmentBytes:
		return "limits.attachment_bytes"
	}
	for _, p := range tl.DenyParams {
		if sh.Sets(p) {
			return "tools.deny_params." + p
		}
	}
	if len(tl.Allow) > 0 {
		bad := ""
		sh.Tools(func(name []byte) {
			if bad == "" && !allowed(tl.Allow, name) {
				bad = "tools.allow"
			}
		})
		return bad
	}
	return ""
}

func allowed(list []string, name []byte) bool {
	for _, a := range list {
		if string(name) == a {
			return true
		}
	}
	return false
}

// Message is the error message of a block: the guardrail and what it
// checked, never the text that matched.
func (d *Decision) Message() string {
	return fmt.Sprintf("the request was blocked by guardrail `%s` (%s); nothing was sent upstream", d.Guardrail, d.Check)
}

// AnswerMessage is the error message of a block of an answer.
func (d *Decision) AnswerMessage() string {
	return fmt.Sprintf("the answer was blocked by guardrail `%s` (%s); it was not relayed", d.Guardrail, d.Check)
}

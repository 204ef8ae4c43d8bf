package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

var (
	providerNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	idRE           = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
)

// ChainPrefix marks a model name that names a chain: "chain:<name>".
const ChainPrefix = "chain:"

// SplitTarget splits a "provider/model" target at its first "/" (provider
// names contain no "/", model names may).
func SplitTarget(target string) (provider, model string, ok bool) {
	provider, model, ok = strings.Cut(target, "/")
	return provider, model, ok && provider != "" && model != ""
}

// Provider returns the configured provider named name, or nil.
func (c *Config) Provider(name string) *Provider {
	for i := range c.Providers {
		if c.Providers[i].Name == name {
			return &c.Providers[i]
		}
	}
	return nil
}

// ClientKeyRequired reports whether the proxy rejects requests without a
// gateway key: proxy.require_client_key, or whether clients are configured.
func (c *Config) ClientKeyRequired() bool {
	if c.Proxy.RequireClientKey != nil {
		return *c.Proxy.RequireClientKey
	}
	return len(c.Clients) > 0
}

// markUnavailable flags the chain steps whose provider was skipped.
func (c *Config) markUnavailable() {
	for _, ch := range c.Chains {
		for i := range ch.Steps {
			p, _, _ := SplitTarget(ch.Steps[i].Target)
			ch.Steps[i].Unavailable = slices.Contains(c.Skipped, p)
		}
	}
}

// Validate checks the whole configuration and reports every problem, each
// as "<file>: <key path>: <problem>", joined with errors.Join. List elements
// are named by index (providers[1].keys[0].id), map entries by name
// (chains.default.steps[0].target). Targets naming a provider listed in
// Skipped are accepted: Load marks those chain steps Unavailable.
func (c *Config) Validate() error {
	v := &validator{cfg: c}
	v.log()
	v.nats()
	v.listen("proxy.listen", c.Proxy.Listen)
	if c.Proxy.PassiveReportInterval < 0 {
		v.add("proxy.passive_report_interval", "must be >= 0 (0 turns the reports off), got %s", c.Proxy.PassiveReportInterval)
	}
	if c.Proxy.ShutdownDelay < 0 {
		v.add("proxy.shutdown_delay", "must be >= 0 (0 stops accepting at once), got %s", c.Proxy.ShutdownDelay)
	}
	if c.Proxy.RetryAfterBound < 0 {
		v.add("proxy.retry_after_bound", "must be >= 0 (0: every Retry-After says X-Should-Retry: false), got %s", c.Proxy.RetryAfterBound)
	}
	if c.Proxy.WriteTimeout < 0 {
		v.add("proxy.write_timeout", "must be >= 0 (0: no bound), got %s", c.Proxy.WriteTimeout)
	}
	if c.Proxy.ShutdownTimeout <= 0 {
		v.add("proxy.shutdown_timeout", "must be > 0, got %s", c.Proxy.ShutdownTimeout)
	}
	if c.Proxy.StartupWait < 0 {
		v.add("proxy.startup_wait", "must be >= 0 (0 does not wait), got %s", c.Proxy.StartupWait)
	}
	v.listen("admin.listen", c.Admin.Listen)
	v.prober()
	if c.Proxy.RequireClientKey != nil && *c.Proxy.RequireClientKey && len(c.Clients) == 0 {
		v.add("proxy.require_client_key", "is true but no clients are configured")
	}
	v.limits()
	v.timeouts("timeouts", c.Timeouts, true)
	v.retry()
	v.resilience("resilience", c.Resilience)
	v.tripOn("trip_on", c.TripOn)
	v.providers()
	v.aliases()
	v.chains()
	v.routing()
	v.clients()
	v.plans()
	v.guardrails()
	v.cache()
	v.prices()
	v.metering()
	v.debug()
	v.telemetry()
	v.adminSection()
	v.references()
	return errors.Join(v.errs...)
}

type validator struct {
	cfg  *Config
	errs []error
	// models holds the configured provider names, each with its model names.
	models map[string]map[string]bool
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: %s", v.cfg.At(path), fmt.Sprintf(format, args...)))
}

// oneOf checks that value is one of allowed.
func (v *validator) oneOf(path, value string, allowed ...string) {
	if !slices.Contains(allowed, value) {
		v.add(path, "unknown value %q (want one of: %s)", value, strings.Join(allowed, ", "))
	}
}

func (v *validator) log() {
	v.oneOf("log.level", v.cfg.Log.Level, "debug", "info", "warn", "error")
	v.oneOf("log.format", v.cfg.Log.Format, "auto", "json", "text")
}

func (v *validator) nats() {
	n := v.cfg.NATS
	if n.URL != "" {
		for u := range strings.SplitSeq(n.URL, ",") {
			u = strings.TrimSpace(u)
			pu, err := url.Parse(u)
			if err != nil || pu.Host == "" || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, pu.Scheme) {
				v.add("nats.url", "%q is not a nats://, tls://, ws:// or wss:// URL", redactURL(u))
			}
		}
	} else if n.Embedded.StoreDir == "" {
		v.add("nats.embedded.store_dir", "must be set when nats.url is empty (embedded server)")
	}
	v.listen("nats.embedded.listen", n.Embedded.Listen)
	if n.Timeout <= 0 {
		v.add("nats.connect_timeout", "must be > 0")
	}
	if n.PingInterval < 100*time.Millisecond {
		v.add("nats.ping_interval", "must be at least 100ms, got %s", n.PingInterval)
	}
	if n.Replicas < 1 || n.Replicas > 5 {
		v.add("nats.replicas", "must be between 1 and 5, got %d", n.Replicas)
	}
	v.oneOf("nats.storage", n.Storage, "file", "memory")
	v.secretRef("nats.password", n.Password, false)
	v.secretRef("nats.token", n.Token, false)
	if n.Password != "" && n.User == "" {
		v.add("nats.password", "is set but nats.user is not")
	}
}

// redactURL drops user information, which may hold a password.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = nil
		return u.String()
	}
	if strings.Contains(s, "@") {
		return "(redacted)"
	}
	return s
}

func (v *validator) listen(path, addr string) {
	_, port, err := net.SplitHostPort(addr) // an empty host listens on every interface
	if err != nil {
		v.add(path, "%q is not host:port", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(path, "%q has no valid port", addr)
	}
}

func (v *validator) limits() {
	l := v.cfg.Limits
	for _, f := range []struct {
		path string
		n    int
	}{
		{"limits.max_in_flight", l.MaxInFlight},
		{"limits.max_body_bytes", l.MaxBodyBytes},
		{"limits.max_attempts", l.MaxAttempts},
		{"limits.max_connections", l.MaxConnections},
	} {
		if f.n <= 0 {
			v.add(f.path, "must be > 0, got %d", f.n)
		}
	}
	for _, f := range []struct {
		path string
		d    time.Duration
	}{
		{"limits.read_timeout", l.ReadTimeout},
		{"limits.idle_timeout", l.IdleTimeout},
	} {
		if f.d <= 0 {
			v.add(f.path, "must be > 0, got %s", f.d)
		}
	}
}

// timeouts checks a timeouts section; global requires attempt > 0, while a
// provider's zero values mean "use the global value".
func (v *validator) timeouts(prefix string, t Timeouts, global bool) {
	for _, f := range []struct {
		key string
		d   time.Duration
	}{
		{"attempt", t.Attempt},
		{"stream_idle", t.StreamIdle},
		{"connect", t.Connect},
		{"request", t.Request},
	} {
		if f.d < 0 {
			v.add(prefix+"."+f.key, "must be >= 0, got %s", f.d)
		}
	}
	if global && t.Attempt == 0 {
		v.add(prefix+".attempt", "must be > 0")
	}
}

func (v *validator) statuses(path string, codes []int) {
	for i, c := range codes {
		if c < 100 || c > 599 {
			v.add(fmt.Sprintf("%s[%d]", path, i), "%d is not an HTTP status", c)
		}
	}
}

func (v *validator) retry() {
	r := v.cfg.Retry
	if r.SameTargetAttempts < 1 {
		v.add("retry.same_target_attempts", "must be >= 1, got %d", r.SameTargetAttempts)
	} else if r.SameTargetAttempts > v.cfg.Limits.MaxAttempts && v.cfg.Limits.MaxAttempts > 0 {
		v.add("retry.same_target_attempts", "%d exceeds limits.max_attempts (%d)", r.SameTargetAttempts, v.cfg.Limits.MaxAttempts)
	}
	if r.BackoffBase < 0 {
		v.add("retry.backoff_base", "must be >= 0, got %s", r.BackoffBase)
	}
	if r.BackoffMax < r.BackoffBase {
		v.add("retry.backoff_max", "%s is less than retry.backoff_base (%s)", r.BackoffMax, r.BackoffBase)
	}
	v.statuses("retry.on_statuses", r.OnStatuses)
	v.statuses("retry.rotate_on_statuses", r.RotateOnStatuses)
	for _, c := range r.RotateOnStatuses {
		if slices.Contains(r.OnStatuses, c) {
			v.add("retry.rotate_on_statuses", "%d is also in retry.on_statuses (retry or rotate, not both)", c)
		}
	}
}

// secretRef checks a reference's syntax; required says whether it must be
// set. Never quotes the value.
func (v *validator) secretRef(path string, r SecretRef, required bool) {
	if r == "" {
		if required {
			v.add(path, "must be set (env:NAME or file:PATH)")
		}
		return
	}
	if err := r.check(); err != nil {
		v.add(path, "%s", err)
	}
}

func (v *validator) providers() {
	v.models = map[string]map[string]bool{}
	for i, p := range v.cfg.Providers {
		at := fmt.Sprintf("providers[%d]", i)
		switch {
		case p.Name == "":
			v.add(at+".name", "must be set")
		case !providerNameRE.MatchString(p.Name):
			v.add(at+".name", "%q must match %s (it is used in NATS subjects)", p.Name, providerNameRE)
		case p.Name == "v1":
			v.add(at+".name", `"v1" is reserved: /v1/... are the gateway's own routes (/<provider>/... passes through)`)
		case v.models[p.Name] != nil:
			v.add(at+".name", "%q is configured twice", p.Name)
		}
		models := map[string]bool{}
		if v.models[p.Name] == nil {
			v.models[p.Name] = models
		}
		v.provider(at, p, models)
	}
}

func (v *validator) provider(at string, p Provider, models map[string]bool) {
	known := slices.Contains(ProviderTypes, p.Type)
	switch {
	case p.Type == "":
		v.add(at+".type", "must be set (one of: %s)", strings.Join(ProviderTypes, ", "))
	case !known:
		v.add(at+".type", "unknown type %q (want one of: %s)", p.Type, strings.Join(ProviderTypes, ", "))
	}
	switch {
	case p.BaseURL == "" && known && DefaultBaseURL(p.Type) == "":
		v.add(at+".base_url", "must be set for type %s", p.Type)
	case p.BaseURL != "":
		u, err := url.Parse(p.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(at+".base_url", "%q is not an http(s) URL", redactURL(p.BaseURL))
		} else if u.User != nil {
			v.add(at+".base_url", "must not carry credentials: use keys")
		}
	}
	if p.Type == "azure" && p.APIVersion == "" {
		v.add(at+".api_version", "must be set for type azure")
	}
	v.providerRouting(at, p)

	if len(p.Keys) == 0 && known && !keysOptional(p.Type) {
		v.add(at+".keys", "must list at least one key (only vllm and ollama may have none)")
	}
	ids := map[string]bool{}
	for j, k := range p.Keys {
		kat := fmt.Sprintf("%s.keys[%d]", at, j)
		switch {
		case k.ID == "":
			v.add(kat+".id", "must be set")
		case !idRE.MatchString(k.ID):
			v.add(kat+".id", "%q must match %s", k.ID, idRE)
		case ids[k.ID]:
			v.add(kat+".id", "%q is used twice in this provider", k.ID)
		}
		ids[k.ID] = true
		v.secretRef(kat+".secret", k.Secret, true)
		if k.Weight < 1 {
			v.add(kat+".weight", "must be >= 1, got %d", k.Weight)
		}
	}

	if len(p.Models) == 0 {
		v.add(at+".models", "must list at least one model")
	}
	for j, m := range p.Models {
		mat := fmt.Sprintf("%s.models[%d]", at, j)
		switch {
		case strings.TrimSpace(m.Name) == "":
			v.add(mat+".name", "must be set")
		case models[m.Name]:
			v.add(mat+".name", "%q is listed twice in this provider", m.Name)
		case len(p.Name)+1+len(m.Name) > MaxModelName:
			// its provider/model id too: the one way to a model whose
			// plain name another provider's shadows
			v.add(mat+".name", "is %d bytes long: its id %q/<name> would be %d, and callers cannot name more than %d",
				len(m.Name), p.Name, len(p.Name)+1+len(m.Name), MaxModelName)
		}
		models[m.Name] = true
		if m.Kind != "" {
			v.oneOf(mat+".kind", m.Kind, KindChat, KindEmbedding, KindCompletion, KindModeration, KindImage, KindSpeech, KindTranscript)
		}
	}

	for name := range p.Headers {
		if name == "" || strings.ContainsAny(name, " :\t\r\n") {
			v.add(at+".headers", "%q is not a header name", name)
		}
	}
	v.timeouts(at+".timeouts", p.Timeouts, false)

	v.resilience(at+".resilience", p.Resilience)
	v.tripOn(at+".trip_on", p.TripOn)

	v.healthCheck(at+".health_check", p.HealthCheck)
}

// target checks a "provider/model" reference. A provider that was skipped
// (optional, secrets unset) is accepted without looking at its models.
func (v *validator) target(path, target string) {
	p, m, ok := SplitTarget(target)
	if !ok {
		v.add(path, "%q is not provider/model", target)
		return
	}
	if slices.Contains(v.cfg.Skipped, p) {
		return
	}
	models, ok := v.models[p]
	switch {
	case !ok:
		v.add(path, "%q: no provider named %q", target, p)
	case !models[m]:
		v.add(path, "%q: provider %q has no model %q", target, p, m)
	}
}

// MaxModelName is the longest model name a request may give, in bytes
// (the proxy refuses longer ones): configured model, alias and chain names
// must fit.
const MaxModelName = 256

func (v *validator) aliases() {
	for _, name := range sortedKeys(v.cfg.Aliases) {
		at := "aliases." + name
		target := v.cfg.Aliases[name]
		if strings.TrimSpace(name) == "" || strings.HasPrefix(name, ChainPrefix) {
			v.add(at, "alias name must be set and must not start with %q", ChainPrefix)
		}
		if len(name) > MaxModelName {
			v.add(at, "alias name is %d bytes long; callers cannot name more than %d", len(name), MaxModelName)
		}
		if chain, ok := strings.CutPrefix(target, ChainPrefix); ok {
			if _, ok := v.cfg.Chains[chain]; !ok {
				v.add(at, "%q: no chain named %q", target, chain)
			}
			continue
		}
		v.target(at, target)
	}
}

func (v *validator) chains() {
	for _, name := range sortedKeys(v.cfg.Chains) {
		at := "chains." + name
		if strings.TrimSpace(name) == "" || strings.Contains(name, "/") {
			v.add(at, "chain name must be set and must not contain '/'")
		}
		if len(ChainPrefix+name) > MaxModelName {
			v.add(at, "chain name is %d bytes long; callers cannot name more than %d (with %q)", len(name), MaxModelName, ChainPrefix)
		}
		steps := v.cfg.Chains[name].Steps
		if len(steps) == 0 {
			v.add(at+".steps", "must list at least one step")
		}
		for i, s := range steps {
			v.target(fmt.Sprintf("%s.steps[%d].target", at, i), s.Target)
		}
	}
}

func (v *validator) clients() {
	ids := map[string]bool{}
	for i, cl := range v.cfg.Clients {
		at := fmt.Sprintf("clients[%d]", i)
		switch {
		case cl.ID == "":
			v.add(at+".id", "must be set")
		case !idRE.MatchString(cl.ID):
			v.add(at+".id", "%q must match %s", cl.ID, idRE)
		case ids[cl.ID]:
			v.add(at+".id", "%q is used twice", cl.ID)
		}
		ids[cl.ID] = true
		v.secretRef(at+".secret", cl.Secret, true)
		if len(cl.Models) == 0 {
			v.add(at+".models", `must list at least one entry ("*" for all)`)
		}
		for j, m := range cl.Models {
			v.clientModel(fmt.Sprintf("%s.models[%d]", at, j), m)
		}
	}
}

// clientModel checks one entry of a client's models: "*", "chain:<name>",
// "<provider>/*", or a model name, alias or provider/model.
func (v *validator) clientModel(path, m string) {
	if strings.TrimSpace(m) == "" {
		v.add(path, "must not be empty")
		return
	}
	if chain, ok := strings.CutPrefix(m, ChainPrefix); ok {
		if _, ok := v.cfg.Chains[chain]; !ok {
			v.add(path, "%q: no chain named %q", m, chain)
		}
		return
	}
	if p, ok := strings.CutSuffix(m, "/*"); ok {
		if _, ok := v.models[p]; !ok && !slices.Contains(v.cfg.Skipped, p) {
			v.add(path, "%q: no provider named %q", m, p)
		}
	}
}

package config

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestValidationErrors(t *testing.T) {
	types := "(want one of: openai, openai-compatible, azure, anthropic, gemini, openrouter, groq, mistral, deepseek, together, xai, vllm, ollama)"
	tests := []struct {
		name string
		yaml string // appended to minimal unless it starts with "providers:"
		env  []string
		want string // "$FILE: " is prepended
	}{
		{"unknown provider type", `
  - name: typo
    type: opnai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, `providers[1].type: unknown type "opnai" ` + types},
		{"missing key id", `
  - name: two
    type: openai
    keys: [{secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, "providers[1].keys[0].id: must be set"},
		{"duplicate provider name", `
  - name: openai
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, `providers[1].name: "openai" is configured twice`},
		{"bad provider name", `
  - name: OpenAI.EU
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, `providers[1].name: "OpenAI.EU" must match ^[a-z0-9][a-z0-9_-]*$`},
		{"bad key id", `
  - name: two
    type: openai
    keys: [{id: "k 1", secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, `providers[1].keys[0].id: "k 1" must match`},
		{"duplicate key id", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}, {id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, `providers[1].keys[1].id: "k" is used twice in this provider`},
		{"no keys", `
  - name: two
    type: groq
    models: [{name: m}]`, nil, "providers[1].keys: must list at least one key"},
		{"model name longer than callers may send", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: ` + strings.Repeat("m", 253) + `}]`, nil, `providers[1].models[0].name: is 253 bytes long: its id "two"/<name> would be 257, and callers cannot name more than 256`},
		{"explicit zero weight", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY, weight: 0}]
    models: [{name: m}]`, nil, "providers[1].keys[0].weight: must be >= 1, got 0"},
		{"inline secret", `
  - name: two
    type: openai
    keys: [{id: k, secret: sk-inline-value-123}]
    models: [{name: m}]`, nil, "providers[1].keys[0].secret: secrets are referenced, not inline: use env:NAME or file:PATH"},
		{"missing secret", `
  - name: two
    type: openai
    keys: [{id: k}]
    models: [{name: m}]`, nil, "providers[1].keys[0].secret: must be set"},
		{"base url required", `
  - name: local
    type: openai-compatible
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, "providers[1].base_url: must be set for type openai-compatible"},
		{"base url not http", `
  - name: two
    type: openai
    base_url: ftp://example.com
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, `providers[1].base_url: "ftp://example.com" is not an http(s) URL`},
		{"azure api version", `
  - name: az
    type: azure
    base_url: https://x.openai.azure.com
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, "providers[1].api_version: must be set for type azure"},
		{"selection", `
  - name: two
    type: openai
    selection: random
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, `providers[1].selection: unknown value "random" (want one of: round_robin, weighted, least_latency, headroom)`},
		{"no models", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]`, nil, "providers[1].models: must list at least one model"},
		{"duplicate model", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}, {name: m}]`, nil, `providers[1].models[1].name: "m" is listed twice in this provider`},
		{"empty model name", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{kind: chat}]`, nil, "providers[1].models[0].name: must be set"},
		{"model kind", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m, kind: video}]`, nil, `providers[1].models[0].kind: unknown value "video" (want one of: chat, embedding, completion, moderation, image, speech, transcription)`},
		{"alias to unknown model", "\naliases:\n  fast: openai/gpt-5-nano", nil, `aliases.fast: "openai/gpt-5-nano": provider "openai" has no model "gpt-5-nano"`},
		{"alias to unknown provider", "\naliases:\n  fast: nobody/m", nil, `aliases.fast: "nobody/m": no provider named "nobody"`},
		{"alias to unknown chain", "\naliases:\n  fast: chain:nope", nil, `aliases.fast: "chain:nope": no chain named "nope"`},
		{"alias not a target", "\naliases:\n  fast: gpt-4o-mini", nil, `aliases.fast: "gpt-4o-mini" is not provider/model`},
		{"chain without steps", "\nchains:\n  empty:\n    steps: []", nil, "chains.empty.steps: must list at least one step"},
		{"chain step target", "\nchains:\n  c:\n    steps:\n      - target: openai/nope", nil, `chains.c.steps[0].target: "openai/nope": provider "openai" has no model "nope"`},
		{"chain name with slash", "\nchains:\n  a/b:\n    steps:\n      - target: openai/gpt-4o-mini", nil, "chains.a/b: chain name must be set and must not contain '/'"},
		{"duplicate client", "\nclients:\n  - {id: c, secret: env:OPENAI_KEY, models: ['*']}\n  - {id: c, secret: env:OPENAI_KEY, models: ['*']}", nil, `clients[1].id: "c" is used twice`},
		{"client without models", "\nclients:\n  - {id: c, secret: env:OPENAI_KEY}", nil, "clients[0].models: must list at least one entry"},
		{"client unknown chain", "\nclients:\n  - {id: c, secret: env:OPENAI_KEY, models: ['chain:x']}", nil, `clients[0].models[0]: "chain:x": no chain named "x"`},
		{"client unknown provider", "\nclients:\n  - {id: c, secret: env:OPENAI_KEY, models: ['nobody/*']}", nil, `clients[0].models[0]: "nobody/*": no provider named "nobody"`},
		{"clients sharing a key", "\nclients:\n  - {id: a, secret: env:OPENAI_KEY, models: ['*']}\n  - {id: b, secret: env:OPENAI_KEY, models: ['*']}", nil, "clients[1].secret: same key as clients[0] (a)"},
		{"client inline secret", "\nclients:\n  - {id: c, secret: gw-inline-123, models: ['*']}", nil, "clients[0].secret: secrets are referenced, not inline"},
		{"require client key without clients", "\nproxy:\n  require_client_key: true", nil, "proxy.require_client_key: is true but no clients are configured"},
		{"limits", "\nlimits:\n  max_in_flight: 0", nil, "limits.max_in_flight: must be > 0, got 0"},
		{"limit from env", "", []string{"SWITCHYARD_LIMITS_MAX_BODY_BYTES=-1"}, "limits.max_body_bytes (from SWITCHYARD_LIMITS_MAX_BODY_BYTES): must be > 0, got -1"},
		{"attempt timeout", "\ntimeouts:\n  attempt: 0s", nil, "timeouts.attempt: must be > 0"},
		{"negative timeout", "\ntimeouts:\n  stream_idle: -1s", nil, "timeouts.stream_idle: must be >= 0, got -1s"},
		{"retry attempts", "\nretry:\n  same_target_attempts: 0", nil, "retry.same_target_attempts: must be >= 1, got 0"},
		{"retry over budget", "\nretry:\n  same_target_attempts: 20", nil, "retry.same_target_attempts: 20 exceeds limits.max_attempts (10)"},
		{"backoff order", "\nretry:\n  backoff_base: 5s\n  backoff_max: 1s", nil, "retry.backoff_max: 1s is less than retry.backoff_base (5s)"},
		{"retry status", "\nretry:\n  on_statuses: [500, 42]", nil, "retry.on_statuses[1]: 42 is not an HTTP status"},
		{"retry and rotate", "\nretry:\n  rotate_on_statuses: [429, 503]", nil, "retry.rotate_on_statuses: 503 is also in retry.on_statuses"},
		{"log level", "\nlog:\n  level: verbose", nil, `log.level: unknown value "verbose" (want one of: debug, info, warn, error)`},
		{"log format", "\nlog:\n  format: xml", nil, `log.format: unknown value "xml" (want one of: auto, json, text)`},
		{"nats storage", "\nnats:\n  storage: disk", nil, `nats.storage: unknown value "disk" (want one of: file, memory)`},
		{"nats replicas", "\nnats:\n  replicas: 7", nil, "nats.replicas: must be between 1 and 5, got 7"},
		{"nats url", "\nnats:\n  url: http://localhost:4222", nil, `nats.url: "http://localhost:4222" is not a nats://, tls://, ws:// or wss:// URL`},
		{"nats inline password", "\nnats:\n  user: sy\n  password: hunter2-inline", nil, "nats.password: secrets are referenced, not inline"},
		{"listen address", "\nproxy:\n  listen: localhost", nil, `proxy.listen: "localhost" is not host:port`},
		{"embedded listen port", "\nnats:\n  embedded:\n    listen: 127.0.0.1:http", nil, `nats.embedded.listen: "127.0.0.1:http" has no valid port`},
		{"breaker scope", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]
    resilience: {breaker: {scope: key}}`, nil, `providers[1].resilience.breaker.scope: unknown value "key" (want one of: provider, model)`},
		{"health check path", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]
    health_check: {path: models}`, nil, `providers[1].health_check.path: "models" must start with /`},
		{"health check body without POST", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]
    health_check: {path: /ping, body: "{}"}`, nil, `providers[1].health_check.body: is only sent with method POST`},
		{"prober lease ttl", "\nprober:\n  lease_ttl: 1500ms", nil, `prober.lease_ttl: must be whole seconds, at least 1s, got 1.5s`},
		{"prober check timeout past the lease", "\nprober:\n  lease_ttl: 2s\n  check_timeout: 3s", nil, `prober.check_timeout: must be at most nine tenths of prober.lease_ttl (1.8s), got 3s: a check ends within the lease of the prober replica that runs it`},
		{"prober jitter", "\nprober:\n  jitter: 1", nil, `prober.jitter: must be from 0 to below 1, got 1`},
		{"prober unhealthy_after", "\nprober:\n  unhealthy_after: 0", nil, `prober.unhealthy_after: must be >= 1, got 0`},
		{"client unknown plan", "\nplans:\n  pro: {requests_per_minute: 60}\nclients:\n  - {id: c, secret: env:OPENAI_KEY, models: ['*'], plan: gold}", nil, `clients[0].plan: no plan named "gold" (plans: [pro])`},
		{"plan negative limit", "\nplans:\n  pro: {tokens_per_minute: -1}", nil, `plans.pro.tokens_per_minute: must be >= 0 (0: no limit), got -1`},
		{"plan negative budget", "\nplans:\n  pro: {budget: {month: -5}}", nil, `plans.pro.budget.month: must be >= 0 (0: no budget), got -5`},
		{"plan unknown chain", "\nplans:\n  pro: {models: ['chain:x']}", nil, `plans.pro.models[0]: "chain:x": no chain named "x"`},
		{"plan name", "\nplans:\n  'gold plan': {requests_per_minute: 1}", nil, `plans.gold plan: plan name "gold plan" must match`},
		{"price without model", "\nprices:\n  - {input: 1}", nil, `prices[0].model: must be set`},
		{"price without prices", "\nprices:\n  - {model: m}", nil, `prices[0]: sets no price: give input and/or output (USD per million tokens)`},
		{"price negative", "\nprices:\n  - {model: m, input: 1, cached_input: -0.5}", nil, `prices[0].cached_input: must be >= 0, got -0.5`},
		{"price unknown provider", "\nprices:\n  - {provider: nobody, model: m, input: 1}", nil, `prices[0].provider: no provider named "nobody"`},
		{"price provider type", "\nprices:\n  - {provider_type: opnai, model: m, input: 1}", nil, `prices[0].provider_type: unknown value "opnai" ` + types},
		{"price provider and type", "\nprices:\n  - {provider: openai, provider_type: openai, model: m, input: 1}", nil, `prices[0].provider_type: give provider or provider_type, not both`},
		{"metering interval", "\nmetering:\n  limits_interval: 1ms", nil, `metering.limits_interval: must be >= 10ms, got 1ms`},
		{"rollups minute", "\nmetering:\n  rollups: {minute: 30m}", nil, `metering.rollups.minute: must be at least 1h0m0s, got 30m0s`},
		{"rollups hour below minute", "\nmetering:\n  rollups: {minute: 100h, hour: 50h}", nil, `metering.rollups.hour: must be at least as long as the finer resolution's 100h0m0s, got 50h0m0s`},
		{"rollups flush", "\nmetering:\n  rollups: {flush_interval: 2m}", nil, `metering.rollups.flush_interval: must be between 10ms and 1m, got 2m0s`},
		{"rollups lease", "", []string{"SWITCHYARD_METERING_ROLLUPS_LEASE=1s"}, `metering.rollups.lease (from SWITCHYARD_METERING_ROLLUPS_LEASE): must be at least 3s, got 1s`},
		{"store scheme", "\nmetering:\n  store: {url: 'mysql://u@db/usage'}", nil, `metering.store.url: scheme "mysql": want postgres://user@host:5432/db`},
		{"store host", "\nmetering:\n  store: {url: 'postgres:///usage'}", nil, `metering.store.url: names no host`},
		{"store password without url", "\nmetering:\n  store: {password: env:PG_PASSWORD}", nil, `metering.store.password: is set without metering.store.url`},
		{"store inline password", "\nmetering:\n  store: {url: 'postgres://u@db/usage', password: hunter2}", nil, `metering.store.password: secrets are referenced, not inline`},
		{"routing strategy", "\nrouting:\n  strategy: fastest", nil, `routing.strategy: unknown value "fastest" (want one of: priority, weighted, least_latency, least_cost, health_aware, budget_aware, region_affinity, capability_aware)`},
		{"routing hash_on", "\nrouting:\n  hash_on: session", nil, `routing.hash_on: unknown value "session" (want client, user or header:<Name>)`},
		{"routing hash header", "\nrouting:\n  hash_on: 'header:X Session'", nil, `routing.hash_on: "header:X Session": want header:<Name> with a valid header name`},
		{"routing explore", "\nrouting:\n  explore: 0.9", nil, `routing.explore: must be from 0 to 0.5, got 0.9`},
		{"routing alpha", "\nrouting:\n  latency_alpha: 2", nil, `routing.latency_alpha: must be above 0 and at most 1`},
		{"guardrail builtin", "\nguardrails:\n  - {name: g, patterns: [emial]}", nil, `guardrails[0].patterns[0]: unknown built-in "emial" (known: email, phone, card_number, iban, provider_key, jwt)`},
		{"guardrail regex", "\nguardrails:\n  - {name: g, regex: ['ok', '(unclosed']}", nil, `guardrails[0].regex[1]: error parsing regexp: missing closing ): ` + "`(unclosed`"},
		{"guardrail regex empty match", "\nguardrails:\n  - {name: g, regex: ['x', 'a*']}", nil, `guardrails[0].regex[1]: can match the empty string`},
		{"guardrail empty", "\nguardrails:\n  - {name: g}", nil, `guardrails[0]: guardrail "g" checks nothing`},
		{"guardrail twice", "\nguardrails:\n  - {name: g, deny: [x]}\n  - {name: g, deny: [y]}", nil, `guardrails[1].name: "g" is defined twice`},
		{"guardrail action", "\nguardrails:\n  - {name: g, deny: [x], action: drop}", nil, `guardrails[0].action: unknown value "drop"`},
		{"guardrail redact without patterns", "\nguardrails:\n  - {name: g, action: redact, limits: {messages: 3}}", nil, `guardrails[0].action: redact needs patterns, regex or deny to replace`},
		{"guardrail stage", "\nguardrails:\n  - {name: g, deny: [x], stage: after}", nil, `guardrails[0].stage: unknown value "after"`},
		{"guardrail output limits", "\nguardrails:\n  - {name: g, stage: output, limits: {messages: 3}}", nil, `guardrails[0].stage: limits and tools bound requests: they check the input stage, not output`},
		{"guardrail limit", "\nguardrails:\n  - {name: g, limits: {messages: -1}}", nil, `guardrails[0].limits.messages: must be >= 0 (0: no bound), got -1`},
		{"guardrail unknown", "\nclients:\n  - {id: c, secret: env:OPENAI_KEY, models: ['*'], guardrails: [nope]}", nil, `clients[0].guardrails[0]: no guardrail named "nope" (guardrails[].name)`},
		{"guardrail attach action", "\nguardrails:\n  - {name: g, limits: {messages: 3}}\nplans:\n  p: {guardrails: ['g:redact']}", nil, `plans.p.guardrails[0]: redact needs patterns, and guardrail "g" has none`},
		{"guardrail attach bad", "\nguardrails:\n  - {name: g, deny: [x]}\nchains:\n  c:\n    guardrails: ['g:drop']\n    steps:\n      - target: openai/gpt-4o-mini", nil, `chains.c.guardrails[0]: "g:drop": unknown action "drop" (want block, redact or warn)`},
		{"headroom wait", "\nrouting:\n  headroom: {max_wait: -1s}", nil, `routing.headroom.max_wait: must not be negative, got -1s`},
		{"chain strategy", "\nchains:\n  c:\n    strategy: cheapest\n    steps:\n      - target: openai/gpt-4o-mini", nil, `chains.c.strategy: unknown value "cheapest"`},
		{"chain step weight", "\nchains:\n  c:\n    steps:\n      - {target: openai/gpt-4o-mini, weight: -2}", nil, `chains.c.steps[0].weight: must be >= 1 (unset: 1), got -2`},
		{"chain region", "\nchains:\n  c:\n    region: EU West\n    steps:\n      - target: openai/gpt-4o-mini", nil, `chains.c.region: "EU West" must match`},
		{"client region required", "\nclients:\n  - {id: c, secret: env:OPENAI_KEY, models: ['*'], region_required: true}", nil, `clients[0].region_required: is true but clients[0].region is not set`},
		{"provider region", `
  - name: two
    type: openai
    region: Europe/Paris
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, `providers[1].region: "Europe/Paris" must match`},
		{"provider budget", `
  - name: two
    type: openai
    budget: {day: -1}
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, `providers[1].budget.day: must be >= 0 (0: no budget), got -1`},
		{"provider priority order", `
  - name: two
    type: openai
    priority_order: ascending
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m}]`, nil, `providers[1].priority_order: unknown value "ascending" (want one of: highest_first, lowest_first)`},
		{"model capability", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m, capabilities: [tools, telepathy]}]`, nil, `providers[1].models[0].capabilities[1]: unknown capability "telepathy" (want one of: tools, vision, audio, json_schema, reasoning)`},
		{"model context window", `
  - name: two
    type: openai
    keys: [{id: k, secret: env:OPENAI_KEY}]
    models: [{name: m, context_window: -5}]`, nil, `providers[1].models[0].context_window: must be >= 0, got -5`},
		{"moderation model kind", "\nguardrails:\n  - {name: g, moderation: {model: openai/gpt-4o-mini}}", nil, `guardrails[0].moderation.model: "openai/gpt-4o-mini" is a model of kind "chat"; a moderation check needs kind "moderation"`},
		{"moderation model unknown", "\nguardrails:\n  - {name: g, moderation: {model: nobody/m}}", nil, `guardrails[0].moderation.model: "nobody/m": no provider named "nobody"`},
		{"moderation model not a target", "\nguardrails:\n  - {name: g, moderation: {model: omni}}", nil, `guardrails[0].moderation.model: "omni" is neither provider/model nor an alias of one`},
		{"moderation without model", "\nguardrails:\n  - {name: g, deny: [x], moderation: {on_error: block}}", nil, `guardrails[0].moderation.model: must be set`},
		{"moderation threshold", "\nguardrails:\n  - {name: g, moderation: {model: openai/gpt-4o-mini, threshold: 2}}", nil, `guardrails[0].moderation.threshold: must be between 0 and 1`},
		{"moderation on_error", "\nguardrails:\n  - {name: g, moderation: {model: openai/gpt-4o-mini, on_error: ignore}}", nil, `guardrails[0].moderation.on_error: unknown value "ignore" (want one of: allow, block)`},
		{"webhook url", "\nguardrails:\n  - {name: g, webhook: {url: 'ftp://h/p', secret: env:OPENAI_KEY}}", nil, `guardrails[0].webhook.url: "ftp://h/p": want an absolute http:// or https:// URL`},
		{"webhook url credentials", "\nguardrails:\n  - {name: g, webhook: {url: 'https://u:p@h/p', secret: env:OPENAI_KEY}}", nil, `guardrails[0].webhook.url: must not carry credentials`},
		{"webhook without secret", "\nguardrails:\n  - {name: g, webhook: {url: 'https://h/p'}}", nil, `guardrails[0].webhook.secret: must be set (env:NAME or file:PATH)`},
		{"webhook inline secret", "\nguardrails:\n  - {name: g, webhook: {url: 'https://h/p', secret: whsec-inline-1}}", nil, `guardrails[0].webhook.secret: secrets are referenced, not inline`},
		{"webhook secret unset", "\nguardrails:\n  - {name: g, webhook: {url: 'https://h/p', secret: env:SWITCHYARD_SECRET_NOT_SET}}", nil, `guardrails[0].webhook.secret: SWITCHYARD_SECRET_NOT_SET is not set`},
		{"webhook timeout", "\nguardrails:\n  - {name: g, webhook: {url: 'https://h/p', secret: env:OPENAI_KEY, timeout: -1s}}", nil, `guardrails[0].webhook.timeout: must be >= 0 (0: 2s), got -1s`},
		{"webhook redact", "\nguardrails:\n  - {name: g, action: redact, deny: [x], webhook: {url: 'https://h/p', secret: env:OPENAI_KEY}}", nil, `guardrails[0].action: redact replaces what patterns match; a moderation or webhook check finds no span to replace`},
		{"cache ttl fraction", "\nchains:\n  c:\n    cache: {ttl: 1500ms}\n    steps:\n      - target: openai/gpt-4o-mini", nil, `chains.c.cache.ttl: must be whole seconds, at least 1s, got 1.5s`},
		{"cache shared on a plan", "\nplans:\n  p: {cache: {ttl: 1h, shared: true}}", nil, `plans.p.cache.shared: is a route's choice`},
		{"semantic cache model kind", "\nchains:\n  c:\n    cache: {ttl: 1h, semantic: {model: openai/gpt-4o-mini}}\n    steps:\n      - target: openai/gpt-4o-mini", nil, `chains.c.cache.semantic.model: "openai/gpt-4o-mini" is a model of kind "chat"; a semantic cache needs kind "embedding"`},
		{"semantic cache on a plan", "\nplans:\n  p: {cache: {ttl: 1h, semantic: {model: openai/gpt-4o-mini}}}", nil, `plans.p.cache.semantic: is a route's choice`},
		{"cache max bytes", "\ncache:\n  max_bytes: -1", nil, `cache.max_bytes: must be >= 0`},
		{"cache client ttl", "\nclients:\n  - {id: c, secret: env:OPENAI_KEY, models: ['*'], cache: {ttl: -1s}}", nil, `clients[0].cache.ttl: must be >= 0, got -1s`},
		{"metering buffer", "", []string{"SWITCHYARD_METERING_BUFFER=0"}, `metering.buffer (from SWITCHYARD_METERING_BUFFER): must be > 0, got 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, minimal+tt.yaml+"\n")
			_, err := Load(path, append(tt.env, minimalEnv...))
			if err == nil {
				t.Fatalf("Load succeeded, want %q", tt.want)
			}
			want := path + ": " + tt.want
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		})
	}
}

func TestValidateCollectsEveryProblem(t *testing.T) {
	cfg := Defaults()
	cfg.File = "configs/gateway.yaml"
	cfg.Log.Level = "loud"
	cfg.Limits.MaxAttempts = 0
	cfg.Providers = []Provider{{Name: "openai", Type: "openai", Keys: []Key{{Secret: "env:X", Weight: 1}}, Models: []Model{{Name: "m"}}}}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		`configs/gateway.yaml: log.level: unknown value "loud" (want one of: debug, info, warn, error)`,
		"configs/gateway.yaml: limits.max_attempts: must be > 0, got 0",
		"configs/gateway.yaml: providers[0].keys[0].id: must be set",
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("Validate =\n%s\nwant\n%s", err, strings.Join(want, "\n"))
	}
}

func TestValidateDefaultsAndExamples(t *testing.T) {
	if err := Defaults().Validate(); err != nil {
		t.Errorf("Defaults().Validate: %v", err)
	}
}

// TestSecretsNeverShown loads configurations holding known secret values
// and checks that no error and no formatting of the result contains one.
func TestSecretsNeverShown(t *testing.T) {
	const (
		keySecret    = "sk-live-KEYSECRET-0001"
		clientSecret = "gw-CLIENTSECRET-0002"
		natsSecret   = "nats-NATSSECRET-0003"
		fileSecret   = "sk-FILESECRET-0004"
		inline       = "sk-INLINESECRET-0005"
	)
	secrets := []string{keySecret, clientSecret, natsSecret, fileSecret, inline}
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/key", []byte(fileSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	good := minimal + `
  - name: two
    type: openai
    keys: [{id: f, secret: "file:` + dir + `/key"}]
    models: [{name: m}]
nats:
  url: nats://127.0.0.1:4222
  user: sy
  password: env:NATS_PASS
clients:
  - {id: c, secret: env:CLIENT_KEY, models: ['*']}
`
	env := []string{"OPENAI_KEY=" + keySecret, "CLIENT_KEY=" + clientSecret, "NATS_PASS=" + natsSecret}

	cfg, err := Load(writeConfig(t, good), env)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if cfg.Providers[1].Keys[0].Value.Reveal() != fileSecret || cfg.NATS.PasswordValue.Reveal() != natsSecret {
		t.Fatal("secrets not resolved")
	}
	var shown []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		shown = append(shown, fmt.Sprintf(verb, cfg), fmt.Sprintf(verb, *cfg), fmt.Sprintf(verb, cfg.Providers[0].Keys[0].Value))
	}

	// Failing loads whose inputs hold the secrets.
	for _, bad := range []string{
		strings.Replace(good, "env:OPENAI_KEY", inline, 1),
		good + "limits:\n  max_in_flight: " + clientSecret + "\n",
		strings.Replace(good, "nats://127.0.0.1:4222", "nats://sy:"+natsSecret+"@127.0.0.1:http", 1),
		strings.Replace(good, "nats:\n", "  - {name: three, type: openai, base_url: 'https://u:"+natsSecret+"@x/v1', keys: [{id: k, secret: env:OPENAI_KEY}], models: [{name: m}]}\nnats:\n", 1),
	} {
		_, err := Load(writeConfig(t, bad), env)
		if err == nil {
			t.Fatalf("Load succeeded for a bad config")
		}
		shown = append(shown, err.Error())
	}
	_, err = Load(writeConfig(t, good), append([]string{"SWITCHYARD_NATS_TOKEN=" + inline}, env...))
	if err == nil {
		t.Fatal("inline token from the environment accepted")
	}
	shown = append(shown, err.Error())

	for _, s := range shown {
		for _, secret := range secrets {
			if strings.Contains(s, secret) || strings.Contains(s, fmt.Sprintf("%x", secret)) {
				t.Errorf("output reveals a secret:\n%s", s)
			}
		}
	}
}

// TestEveryConfigKeyDocumented fails for each key path of Config that
// configs/README.md does not mention (in backquotes).
func TestEveryConfigKeyDocumented(t *testing.T) {
	b, err := os.ReadFile("../../configs/README.md")
	if err != nil {
		t.Fatalf("read the configuration reference: %v", err)
	}
	doc := string(b)
	var missing []string
	for _, p := range KeyPaths() {
		if !strings.Contains(doc, "`"+p+"`") {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		t.Errorf("configs/README.md does not document %d key(s):\n%s", len(missing), strings.Join(missing, "\n"))
	}
}

// TestReadmeExampleLoads loads the full example of configs/README.md.
func TestReadmeExampleLoads(t *testing.T) {
	b, err := os.ReadFile("../../configs/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Full example\n\n```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("configs/README.md has no full example")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(dir+"/secrets", 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"openai-secondary", "ops", "ops-admin"} {
		if err := os.WriteFile(dir+"/secrets/"+f, []byte("s-"+f+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const credKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // base64 of 32 bytes
	if err := os.WriteFile(dir+"/secrets/credentials-key", []byte(credKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := dir + "/gateway.yaml"
	if err := os.WriteFile(path, []byte(example), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, []string{"OPENAI_API_KEY=a", "OPENAI_BACKUP_KEY=b", "AZURE_EU_KEY=c", "TEAM_SEARCH_KEY=d", "ADMIN_READ_TOKEN=e"})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(cfg.Credentials.Key) != 32 || cfg.Admin.Tokens[0].Value.Reveal() != "s-ops-admin" || cfg.Admin.Tokens[1].Role != RoleRead {
		t.Errorf("admin section not resolved: key %d bytes, tokens %+v", len(cfg.Credentials.Key), cfg.Admin.Tokens)
	}
	if len(cfg.Skipped) != 1 || cfg.Skipped[0] != "anthropic" || !cfg.Chains["default"].Steps[2].Unavailable {
		t.Errorf("skipped = %v", cfg.Skipped)
	}
	if cfg.Clients[1].Value.Reveal() != "s-ops" {
		t.Errorf("client file secret not resolved")
	}
}

// TestMeteringStore: metering.store's password is referenced and resolved
// by Load; a password written in the URL (or its query) is refused by key
// and file, and no message quotes it.
func TestMeteringStore(t *testing.T) {
	path := writeConfig(t, minimal+"\nmetering:\n  store: {url: 'postgres://switchyard@db:5432/usage', password: env:PG_PASSWORD}\n")
	cfg, err := Load(path, append([]string{"PG_PASSWORD=s3cret-pg"}, minimalEnv...))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Metering.Store.PasswordValue.Reveal(); got != "s3cret-pg" {
		t.Errorf("password %q", got)
	}
	if _, err := Load(path, minimalEnv); err == nil || !strings.Contains(err.Error(), path+": metering.store.password: PG_PASSWORD is not set") {
		t.Errorf("unset password: %v", err)
	}
	for _, u := range []string{"postgres://switchyard:s3cret-pg@db/usage", "postgres://switchyard@db/usage?password=s3cret-pg"} {
		path := writeConfig(t, minimal+"\nmetering:\n  store: {url: '"+u+"'}\n")
		_, err := Load(path, minimalEnv)
		if err == nil || !strings.Contains(err.Error(), path+": metering.store.url: holds a password: secrets are referenced, not inline") {
			t.Errorf("%s: %v", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error quotes the password: %v", err)
		}
	}
}

// TestEffectiveGuardrails: the most specific level wins: a later list
// changes an attached guardrail's action or detaches it, and keeps the
// order of first attachment; each names the level that last named it.
func TestEffectiveGuardrails(t *testing.T) {
	got := Effective([]string{"a", "b"}, []string{"b:warn", "c"}, []string{"!a", "d:redact", "c:block"})
	want := []Attachment{{Name: "b", Action: "warn", Level: 1}, {Name: "c", Action: "block", Level: 2}, {Name: "d", Action: "redact", Level: 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Effective = %+v, want %+v", got, want)
	}
	if got := Effective(nil, nil, []string{"!x"}); len(got) != 0 {
		t.Errorf("detaching what nothing attached: %+v", got)
	}
}

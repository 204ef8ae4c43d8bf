package config

import (
	"slices"
	"time"
)

// Defaults returns the configuration used for every key that neither the
// file nor the environment sets. Per-element defaults of lists (a key's
// weight, a model's kind, a provider's selection and base URL) are applied
// by Load to each element; see configs/README.md.
func Defaults() *Config {
	return &Config{
		Log: Log{Level: "info", Format: "auto"},
		NATS: NATS{
			Timeout:      5 * time.Second,
			PingInterval: 5 * time.Second,
			Embedded:     Embedded{Listen: "127.0.0.1:4222", StoreDir: "./data/nats"},
			Replicas:     1,
			Storage:      "file",
		},
		Proxy: Proxy{Listen: "127.0.0.1:8080", PassiveReportInterval: 10 * time.Second, StartupWait: 5 * time.Second,
			ShutdownTimeout: 10 * time.Second, WriteTimeout: 5 * time.Minute, RetryAfterBound: 30 * time.Second},
		Admin: Admin{Listen: "127.0.0.1:8081"},
		Credentials: Credentials{References: References{
			EnvPrefixes: slices.Clone(DefaultEnvPrefixes),
			FileDirs:    slices.Clone(DefaultFileDirs),
		}},
		Prober: defaultProber(),
		Limits: Limits{
			MaxInFlight:  100,
			MaxBodyBytes: 10 << 20,
			MaxAttempts:  10,
			// A request body of 10 MiB at 1 MiB/s fits in 30 s.
			ReadTimeout:    30 * time.Second,
			IdleTimeout:    2 * time.Minute,
			MaxConnections: 4096,
		},
		Timeouts: Timeouts{
			Attempt:    60 * time.Second,
			StreamIdle: 30 * time.Second,
			Connect:    10 * time.Second,
		},
		Metering: Metering{
			Retention:            30 * 24 * time.Hour,
			MaxBytes:             4 << 30,
			Buffer:               100_000,
			LimitsInterval:       250 * time.Millisecond,
			EstimateOutputTokens: 1024,
			Rollups: Rollups{Minute: 48 * time.Hour, Hour: 90 * 24 * time.Hour, Day: 2 * 365 * 24 * time.Hour,
				FlushInterval: time.Second, Lease: 10 * time.Second},
		},
		Debug: Debug{Retention: 24 * time.Hour, MaxBytes: 1 << 30, Buffer: DefaultDebugBuffer},
		Retry: Retry{
			SameTargetAttempts: 2,
			BackoffBase:        100 * time.Millisecond,
			BackoffMax:         2 * time.Second,
			OnStatuses:         []int{500, 502, 503, 504, 529},
			OnTransportErrors:  true,
			RotateOnStatuses:   []int{429},
		},
	}
}

// Per-element defaults, applied by Load where the element omits the key.
const (
	DefaultKeyPriority = 0
	DefaultKeyWeight   = 1
	DefaultSelection   = SelectionRoundRobin
	DefaultModelKind   = KindChat
)

// Key selection among keys of equal priority.
const (
	SelectionRoundRobin = "round_robin"
	SelectionWeighted   = "weighted"
)

// Model kinds.
const (
	KindChat       = "chat"
	KindEmbedding  = "embedding"
	KindCompletion = "completion" // legacy /v1/completions (instruct models)
	KindModeration = "moderation"
	KindImage      = "image"
	KindSpeech     = "speech"        // /v1/audio/speech (text to speech)
	KindTranscript = "transcription" // /v1/audio/transcriptions (speech to text)
)

// ProviderTypes lists the known provider types, in the order error
// messages name them.
var ProviderTypes = []string{
	"openai", "openai-compatible", "azure", "anthropic", "gemini", "openrouter",
	"groq", "mistral", "deepseek", "together", "xai", "vllm", "ollama",
}

// defaultBaseURLs holds the base URL of each provider type that has a
// public endpoint. Types missing here require base_url.
var defaultBaseURLs = map[string]string{
	"openai":     "https://api.openai.com/v1",
	"anthropic":  "https://api.anthropic.com",
	"gemini":     "https://generativelanguage.googleapis.com/v1beta/openai",
	"openrouter": "https://openrouter.ai/api/v1",
	"groq":       "https://api.groq.com/openai/v1",
	"mistral":    "https://api.mistral.ai/v1",
	"deepseek":   "https://api.deepseek.com/v1",
	"together":   "https://api.together.xyz/v1",
	"xai":        "https://api.x.ai/v1",
}

// DefaultBaseURL returns the base URL a provider of type typ uses when
// base_url is empty, or "" when the type requires base_url.
func DefaultBaseURL(typ string) string { return defaultBaseURLs[typ] }

// keysOptional reports whether a provider of type typ may have no keys
// (local servers that take no credential).
func keysOptional(typ string) bool { return typ == "vllm" || typ == "ollama" }

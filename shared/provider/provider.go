// Package provider knows how each provider type is spoken to: which wire
// format it takes, how its URLs are built, where its credential goes, and how
// it signals errors and the end of a stream.
package provider

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"switchyard.dev/shared/jsonfield"
)

// Format is the wire format of an API.
type Format uint8

// The wire formats.
const (
	FormatOpenAI    Format = iota // OpenAI chat completions / embeddings
	FormatAnthropic               // Anthropic messages
	// FormatResponses is the OpenAI Responses API's: its errors are
	// OpenAI's, its stream named events (response.created ...
	// response.completed), its usage input_tokens/output_tokens.
	FormatResponses
)

func (f Format) String() string {
	switch f {
	case FormatAnthropic:
		return "anthropic"
	case FormatResponses:
		return "responses"
	}
	return "openai"
}

// Op is what an attempt asks of the provider.
type Op uint8

// The operations.
const (
	OpChat           Op = iota // chat completions (OpenAI format) or messages (Anthropic format)
	OpEmbeddings               // embeddings (OpenAI format only)
	OpModels                   // list models
	OpCompletions              // legacy text completions (OpenAI format only)
	OpModerations              // moderations (OpenAI format only)
	OpImages                   // image generations (OpenAI format only)
	OpCountTokens              // count a messages request's tokens (Anthropic format only)
	OpResponses                // the Responses API (OpenAI and OpenAI-compatible providers, natively)
	OpSpeech                   // text to speech: a binary audio answer (OpenAI format only)
	OpTranscriptions           // speech to text: a multipart request (OpenAI format only)
)

// opNames are the operations' names (Op.String), as hold records and
// events carry them.
var opNames = [...]string{OpChat: "chat", OpEmbeddings: "embeddings", OpModels: "models", OpCompletions: "completions",
	OpModerations: "moderations", OpImages: "images", OpCountTokens: "count_tokens", OpResponses: "responses",
	OpSpeech: "speech", OpTranscriptions: "transcriptions"}

// String is the operation's name: chat, embeddings, completions, ...
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "op" + strconv.Itoa(int(o))
}

// ParseOp is the operation of a name String gives.
func ParseOp(name string) (Op, bool) {
	for i, n := range opNames {
		if n == name {
			return Op(i), true
		}
	}
	return 0, false
}

// DefaultAnthropicVersion is sent as anthropic-version when none is set.
const DefaultAnthropicVersion = "2023-06-01"

// Types are the provider types Switchyard speaks to, with their default base
// URLs ("" where the operator must give one).
var Types = map[string]string{
	"openai":            "https://api.openai.com/v1",
	"openai-compatible": "",
	"azure":             "",
	"anthropic":         "https://api.anthropic.com",
	"gemini":            "https://generativelanguage.googleapis.com/v1beta/openai",
	"openrouter":        "https://openrouter.ai/api/v1",
	"groq":              "https://api.groq.com/openai/v1",
	"mistral":           "https://api.mistral.ai/v1",
	"deepseek":          "https://api.deepseek.com/v1",
	"together":          "https://api.together.xyz/v1",
	"xai":               "https://api.x.ai/v1",
	"vllm":              "",
	"ollama":            "",
}

// Adapter speaks to one configured provider. It is immutable and safe for
// concurrent use.
type Adapter struct {
	typ        string
	format     Format
	base       string // without trailing slash
	apiVersion string
	headers    [][2]string
	// precomputed URLs for formats whose URL does not depend on the model
	chatURL, embedURL, modelsURL string
}

// New returns the adapter for a provider type. baseURL "" takes the type's
// default; apiVersion is Azure's api-version or Anthropic's
// anthropic-version; headers are added to every request.
func New(typ, baseURL, apiVersion string, headers map[string]string) *Adapter {
	if baseURL == "" {
		baseURL = Types[typ]
	}
	a := &Adapter{typ: typ, base: strings.TrimRight(baseURL, "/"), apiVersion: apiVersion}
	for k, v := range headers {
		a.headers = append(a.headers, [2]string{http.CanonicalHeaderKey(k), v})
	}
	switch typ {
	case "anthropic":
		a.format = FormatAnthropic
		if a.apiVersion == "" {
			a.apiVersion = DefaultAnthropicVersion
		}
		root := strings.TrimSuffix(a.base, "/v1")
		a.chatURL = root + "/v1/messages"
		a.modelsURL = root + "/v1/models"
	case "azure":
		q := "?api-version=" + url.QueryEscape(a.apiVersion)
		a.modelsURL = a.base + "/openai/models" + q
	default:
		a.chatURL = a.base + "/chat/completions"
		a.embedURL = a.base + "/embeddings"
		a.modelsURL = a.base + "/models"
	}
	return a
}

// Type is the provider type ("openai", "anthropic", ...); it is also the
// family the failure classifier reads errors with.
func (a *Adapter) Type() string { return a.typ }

// Base is the provider's base URL, without a trailing slash (passthrough
// paths are relative to it).
func (a *Adapter) Base() string { return a.base }

// Format is the wire format the provider takes for chat.
func (a *Adapter) Format() Format { return a.format }

// Supports reports whether the provider offers op: chat and models
// everywhere, count_tokens on Anthropic, the other operations on
// OpenAI-format providers (Azure has no moderations endpoint).
func (a *Adapter) Supports(op Op) bool {
	switch op {
	case OpChat, OpModels:
		return true
	case OpCountTokens:
		return a.format == FormatAnthropic
	case OpModerations:
		return a.format == FormatOpenAI && a.typ != "azure"
	case OpResponses:
		// Where the Responses API is served: OpenAI, OpenRouter and the
		// operator's own OpenAI-compatible servers (Azure's lives under
		// another path: not yet).
		return a.typ == "openai" || a.typ == "openrouter" || a.typ == "openai-compatible"
	}
	return a.format == FormatOpenAI
}

// opPaths are the paths of the operations whose URL is the base URL and a
// path (OpenAI format; Azure's deployments take the same paths).
var opPaths = map[Op]string{
	OpChat: "/chat/completions", OpEmbeddings: "/embeddings", OpCompletions: "/completions",
	OpModerations: "/moderations", OpImages: "/images/generations", OpResponses: "/responses",
	OpSpeech: "/audio/speech", OpTranscriptions: "/audio/transcriptions",
}

// ModelInURL reports whether the model travels in the URL (Azure
// deployments) rather than in the body.
func (a *Adapter) ModelInURL() bool { return a.typ == "azure" }

// TakesMaxCompletionTokens reports whether a chat request's output limit
// goes as max_completion_tokens rather than max_tokens: OpenAI's reasoning
// models (o1, o3, o4, gpt-5...) refuse max_tokens (400
// unsupported_parameter), and OpenAI takes the new name for every chat
// model; so does Azure from api-version 2024-09-01 on. Other
// OpenAI-compatible servers (vLLM, Ollama, Groq, Mistral...) may know only
// max_tokens.
func (a *Adapter) TakesMaxCompletionTokens() bool {
	return a.typ == "openai" || a.typ == "azure" && a.apiVersion >= "2024-09-01"
}

// URL is the endpoint for op with the given upstream model.
func (a *Adapter) URL(op Op, upstreamModel string) string {
	if a.typ == "azure" && op != OpModels {
		return a.base + "/openai/deployments/" + url.PathEscape(upstreamModel) + opPaths[op] +
			"?api-version=" + url.QueryEscape(a.apiVersion)
	}
	switch op {
	case OpChat:
		return a.chatURL
	case OpEmbeddings:
		return a.embedURL
	case OpModels:
		return a.modelsURL
	case OpCountTokens:
		return a.chatURL + "/count_tokens"
	}
	return a.base + opPaths[op]
}

// Authorize sets the credential and the provider's fixed headers on an
// upstream request. secret may be "" for keyless providers (vLLM, Ollama).
func (a *Adapter) Authorize(h http.Header, secret string) {
	switch a.typ {
	case "anthropic":
		if secret != "" {
			h["X-Api-Key"] = []string{secret}
		}
		if h.Get("Anthropic-Version") == "" {
			h["Anthropic-Version"] = []string{a.apiVersion}
		}
	case "azure":
		if secret != "" {
			h["Api-Key"] = []string{secret}
		}
	default:
		if secret != "" {
			h["Authorization"] = []string{"Bearer " + secret}
		}
	}
	for _, kv := range a.headers {
		h[kv[0]] = []string{kv[1]}
	}
}

// ClientCredentialHeaders are the request headers that carry a caller's
// credential. None of them is ever forwarded upstream.
var ClientCredentialHeaders = []string{"Authorization", "X-Api-Key", "Proxy-Authorization", "Api-Key", "X-Goog-Api-Key"}

// ErrorIn200 reports whether a 200 response body is really an error
// (`{"error": ...}` with no result, as OpenRouter and some compatible servers
// send), and the status it carries: error.code when it is an HTTP status,
// else 502.
func ErrorIn200(body []byte) (status int, isError bool) {
	b := bytes.TrimLeft(body, " \t\r\n")
	if len(b) == 0 || b[0] != '{' {
		return 0, false
	}
	v, _, _, ok := jsonfield.Find(b, "error")
	if !ok || len(v) == 0 || v[0] == 'n' { // absent or null
		return 0, false
	}
	if _, _, _, ok := jsonfield.Find(b, "choices"); ok {
		if _, _, _, ok := jsonfield.Find(b, "id"); ok {
			return 0, false // a real completion that also carries an error field
		}
	}
	status = 502
	if v[0] == '{' {
		if c, _, _, ok := jsonfield.Find(v, "code"); ok {
			if n := atoi(c); n >= 400 && n <= 599 {
				status = n
			}
		}
	}
	return status, true
}

func atoi(b []byte) int {
	b = bytes.Trim(b, `" `)
	if len(b) == 0 || len(b) > 4 {
		return 0
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// ErrInvalidResponse: a 200 answer that is not the endpoint's response.
var ErrInvalidResponse = errors.New("not a valid response")

// responseField is the top-level field every response of op in format f
// carries.
func responseField(f Format, op Op) string {
	switch {
	case op == OpEmbeddings, op == OpModels, op == OpImages:
		return "data"
	case op == OpModerations:
		return "results"
	case op == OpCountTokens:
		return "input_tokens"
	case op == OpResponses:
		return "output"
	case f == FormatAnthropic:
		return "content"
	}
	return "choices" // chat and completions
}

func clipBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// Package fakeprovider is a scriptable upstream that speaks the wire formats
// of OpenAI, Azure OpenAI, Anthropic, Gemini (OpenAI-compatible endpoint) and
// OpenRouter: chat completions, legacy completions, the Responses API,
// embeddings, moderations, image generations, speech, transcriptions and
// models; Anthropic messages and messages/count_tokens (README.md gives each
// wire shape). End-to-end tests, the demo and the benchmark start it
// in-process (Start or New + Handler) and script it with rules: per key, model
// and path, answer with a named provider error, add latency, slow or cut a
// stream, reset the connection or hang. A rate limiter (RateLimit) counts
// each key's calls and tokens in fixed windows, states them in the
// flavour's rate-limit headers and refuses with the flavour's 429. Every
// call it receives is recorded.
package fakeprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultChunks is the number of content chunks a stream carries when neither
// the options nor a rule say otherwise.
const DefaultChunks = 5

// DefaultMaxCalls is how many calls are kept when Options.MaxCalls is 0.
const DefaultMaxCalls = 100_000

// DefaultModels are listed by /models when Options.Models is empty.
var DefaultModels = []string{
	"gpt-4o-mini",
	"gpt-4o",
	"text-embedding-3-small",
	"gpt-3.5-turbo-instruct",
	"omni-moderation-latest",
	"gpt-image-1",
	"dall-e-3",
	"tts-1",
	"gpt-4o-mini-tts",
	"whisper-1",
	"gpt-4o-transcribe",
	"claude-3-5-haiku-latest",
	"claude-sonnet-4-20250514",
	"gemini-2.0-flash",
}

// Options configure a Server. The zero value is usable.
type Options struct {
	Name         string        `json:"name,omitempty" yaml:"name,omitempty"`                   // label used in logs and ids
	Addr         string        `json:"addr,omitempty" yaml:"addr,omitempty"`                   // listen address for Start; "" = 127.0.0.1:0
	Keys         []string      `json:"keys,omitempty" yaml:"keys,omitempty"`                   // if non-empty, only these keys are accepted
	Models       []string      `json:"models,omitempty" yaml:"models,omitempty"`               // models listed by /models (default DefaultModels)
	StrictModels bool          `json:"strict_models,omitempty" yaml:"strict_models,omitempty"` // unknown model -> that flavor's model-not-found error
	Latency      time.Duration `json:"latency,omitempty" yaml:"latency,omitempty"`             // default first-byte latency
	ChunkDelay   time.Duration `json:"chunk_delay,omitempty" yaml:"chunk_delay,omitempty"`     // default delay between stream chunks
	Chunks       int           `json:"chunks,omitempty" yaml:"chunks,omitempty"`               // default chunk count (DefaultChunks when 0)
	Rules        []Rule        `json:"rules,omitempty" yaml:"rules,omitempty"`                 // initial rules
	MaxCalls     int           `json:"max_calls,omitempty" yaml:"max_calls,omitempty"`         // calls kept by the recorder (DefaultMaxCalls when 0); the oldest are dropped
	RateLimit    RateLimit     `json:"rate_limit,omitempty" yaml:"rate_limit,omitempty"`       // the rate limiter (off when it limits nothing)
	Log          *slog.Logger  `json:"-" yaml:"-"`
	// Clock is the rate limiter's time source (the wall clock when nil).
	Clock Clock `json:"-" yaml:"-"`
}

// Validate reports the first bad setting, naming its key.
func (o Options) Validate() error {
	if o.Latency < 0 {
		return fmt.Errorf("latency: must not be negative, got %s", o.Latency)
	}
	if o.ChunkDelay < 0 {
		return fmt.Errorf("chunk_delay: must not be negative, got %s", o.ChunkDelay)
	}
	if o.MaxCalls < 0 {
		return fmt.Errorf("max_calls: must not be negative, got %d", o.MaxCalls)
	}
	if o.Chunks < 0 {
		return fmt.Errorf("chunks: must not be negative, got %d", o.Chunks)
	}
	for i, r := range o.Rules {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("rules[%d].%w", i, err)
		}
	}
	if err := o.RateLimit.Validate(); err != nil {
		return fmt.Errorf("rate_limit.%w", err)
	}
	return nil
}

// Rule scripts the answer to matching calls. Key, Model and Path select calls
// (empty = any; Path matches as a suffix of the URL path); the other fields
// say what to do. Rules are evaluated newest first and the first match wins.
type Rule struct {
	ID    string `json:"id,omitempty" yaml:"id,omitempty"`
	Key   string `json:"key,omitempty" yaml:"key,omitempty"`
	Model string `json:"model,omitempty" yaml:"model,omitempty"`
	Path  string `json:"path,omitempty" yaml:"path,omitempty"`

	// Error names an entry of the error library (see ErrorNames).
	Error string `json:"error,omitempty" yaml:"error,omitempty"`
	// Status overrides the error's HTTP status; alone it answers the
	// flavor's generic server error with this status.
	Status int `json:"status,omitempty" yaml:"status,omitempty"`
	// RetryAfter overrides the wait an error states (headers and body).
	RetryAfter time.Duration `json:"retry_after,omitempty" yaml:"retry_after,omitempty"`

	// Times limits the rule to the next N matching calls (0 = until removed).
	Times int `json:"times,omitempty" yaml:"times,omitempty"`
	// Probability applies the rule to a random share of matching calls
	// (0 = always).
	Probability float64 `json:"probability,omitempty" yaml:"probability,omitempty"`

	FirstByteLatency time.Duration `json:"first_byte_latency,omitempty" yaml:"first_byte_latency,omitempty"`
	ChunkDelay       time.Duration `json:"chunk_delay,omitempty" yaml:"chunk_delay,omitempty"`
	Chunks           int           `json:"chunks,omitempty" yaml:"chunks,omitempty"`
	// CutAfter ends a stream cleanly after K content chunks, without its
	// terminal events. With Reset, the connection is reset there instead.
	CutAfter int `json:"cut_after,omitempty" yaml:"cut_after,omitempty"`
	// CutAtStart ends a stream (or speech audio) before its first content
	// chunk, after the flavour's opening events: chat's role chunk (Azure's
	// prompt-filter chunk before it), Anthropic's message_start,
	// content_block_start and ping, the Responses API's response.created,
	// in_progress, output_item.added and content_part.added.
	// Legacy completions, transcriptions and speech have none, so theirs is
	// an answer that fails between its headers and its first byte. With
	// Reset, the connection is reset there instead. Calls that do not
	// stream ignore it.
	CutAtStart bool `json:"cut_at_start,omitempty" yaml:"cut_at_start,omitempty"`

	// Reset resets the TCP connection (SO_LINGER 0) instead of answering.
	Reset bool `json:"reset,omitempty" yaml:"reset,omitempty"`
	// Hang never answers, until the client goes away or the server closes.
	Hang bool `json:"hang,omitempty" yaml:"hang,omitempty"`
	// ErrorInStream sends Error (or the flavor's default stream error) as an
	// SSE error event after ErrorAfterChunks content chunks of a stream.
	ErrorInStream    bool `json:"error_in_stream,omitempty" yaml:"error_in_stream,omitempty"`
	ErrorAfterChunks int  `json:"error_after_chunks,omitempty" yaml:"error_after_chunks,omitempty"`
	// Text is the answer's content, chunk by chunk: a stream sends each
	// as one content delta, a whole answer their concatenation (it
	// overrides Chunks). None: "chunk 0 chunk 1 ...".
	Text []string `json:"text,omitempty" yaml:"text,omitempty"`
}

// Validate reports the first bad field of the rule, naming its key.
func (r Rule) Validate() error {
	switch {
	case r.Error != "" && !knownError(r.Error):
		return fmt.Errorf("error: unknown error name %q (see ErrorNames)", r.Error)
	case r.Status != 0 && (r.Status < 100 || r.Status > 599):
		return fmt.Errorf("status: %d is not an HTTP status", r.Status)
	case r.Times < 0:
		return fmt.Errorf("times: must not be negative, got %d", r.Times)
	case r.Probability < 0 || r.Probability > 1:
		return fmt.Errorf("probability: must be within 0..1, got %v", r.Probability)
	case r.Chunks < 0:
		return fmt.Errorf("chunks: must not be negative, got %d", r.Chunks)
	case r.CutAfter < 0:
		return fmt.Errorf("cut_after: must not be negative, got %d", r.CutAfter)
	case r.ErrorAfterChunks < 0:
		return fmt.Errorf("error_after_chunks: must not be negative, got %d", r.ErrorAfterChunks)
	case r.FirstByteLatency < 0 || r.ChunkDelay < 0 || r.RetryAfter < 0:
		return errors.New("first_byte_latency, chunk_delay, retry_after: must not be negative")
	case r.Reset && r.Hang:
		return errors.New("reset, hang: choose one")
	case r.CutAtStart && r.CutAfter > 0:
		return errors.New("cut_at_start, cut_after: choose one")
	}
	return nil
}

// Call is one request the server received.
type Call struct {
	At             time.Time
	Method         string
	Path           string
	Query          string
	Header         http.Header
	Key            string // the credential presented, whichever header carried it
	Model          string // body "model", or the Azure deployment
	Stream         bool
	Body           []byte // the raw body (multipart/form-data for transcriptions)
	FileSize       int64  // transcriptions: bytes of the uploaded "file" part
	IdempotencyKey string
	Rule           string // ID of the rule that matched, "" if none
	// Status is the HTTP status answered, set as the answer's headers are
	// written: 0 while the call waits for its first byte, and for a call
	// that hangs or is reset.
	Status int
	// RateLimited reports that the rate limiter refused the call (429).
	RateLimited bool
}

// Duration is a time.Duration written as a string ("250ms", "2s") in JSON.
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string such as "250ms"; the number 0 is
// accepted too, other numbers are refused as ambiguous.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		if n, nerr := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); nerr == nil && n == 0 {
			*d = 0
			return nil
		}
		return fmt.Errorf("duration must be a string like \"250ms\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("parse duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// ruleJSON is Rule with durations as strings.
type ruleJSON struct {
	ID               string   `json:"id,omitempty"`
	Key              string   `json:"key,omitempty"`
	Model            string   `json:"model,omitempty"`
	Path             string   `json:"path,omitempty"`
	Error            string   `json:"error,omitempty"`
	Status           int      `json:"status,omitempty"`
	RetryAfter       Duration `json:"retry_after,omitempty"`
	Times            int      `json:"times,omitempty"`
	Probability      float64  `json:"probability,omitempty"`
	FirstByteLatency Duration `json:"first_byte_latency,omitempty"`
	ChunkDelay       Duration `json:"chunk_delay,omitempty"`
	Chunks           int      `json:"chunks,omitempty"`
	CutAfter         int      `json:"cut_after,omitempty"`
	CutAtStart       bool     `json:"cut_at_start,omitempty"`
	Reset            bool     `json:"reset,omitempty"`
	Hang             bool     `json:"hang,omitempty"`
	ErrorInStream    bool     `json:"error_in_stream,omitempty"`
	ErrorAfterChunks int      `json:"error_after_chunks,omitempty"`
	Text             []string `json:"text,omitempty"`
}

// MarshalJSON writes the rule with snake_case keys and string durations.
func (r Rule) MarshalJSON() ([]byte, error) {
	return json.Marshal(ruleJSON{
		ID: r.ID, Key: r.Key, Model: r.Model, Path: r.Path,
		Error: r.Error, Status: r.Status, RetryAfter: Duration(r.RetryAfter),
		Times: r.Times, Probability: r.Probability,
		FirstByteLatency: Duration(r.FirstByteLatency), ChunkDelay: Duration(r.ChunkDelay),
		Chunks: r.Chunks, CutAfter: r.CutAfter, CutAtStart: r.CutAtStart,
		Reset: r.Reset, Hang: r.Hang,
		ErrorInStream: r.ErrorInStream, ErrorAfterChunks: r.ErrorAfterChunks, Text: r.Text,
	})
}

// UnmarshalJSON reads a rule; unknown keys are an error.
func (r *Rule) UnmarshalJSON(b []byte) error {
	var j ruleJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("decode rule: %w", err)
	}
	*r = Rule{
		ID: j.ID, Key: j.Key, Model: j.Model, Path: j.Path,
		Error: j.Error, Status: j.Status, RetryAfter: time.Duration(j.RetryAfter),
		Times: j.Times, Probability: j.Probability,
		FirstByteLatency: time.Duration(j.FirstByteLatency), ChunkDelay: time.Duration(j.ChunkDelay),
		Chunks: j.Chunks, CutAfter: j.CutAfter, CutAtStart: j.CutAtStart,
		Reset: j.Reset, Hang: j.Hang,
		ErrorInStream: j.ErrorInStream, ErrorAfterChunks: j.ErrorAfterChunks, Text: j.Text,
	}
	return nil
}

// optionsJSON is Options with durations as strings.
type optionsJSON struct {
	Name         string     `json:"name,omitempty"`
	Addr         string     `json:"addr,omitempty"`
	Keys         []string   `json:"keys,omitempty"`
	Models       []string   `json:"models,omitempty"`
	StrictModels bool       `json:"strict_models,omitempty"`
	Latency      Duration   `json:"latency,omitempty"`
	ChunkDelay   Duration   `json:"chunk_delay,omitempty"`
	Chunks       int        `json:"chunks,omitempty"`
	Rules        []Rule     `json:"rules,omitempty"`
	MaxCalls     int        `json:"max_calls,omitempty"`
	RateLimit    *RateLimit `json:"rate_limit,omitempty"`
}

// MarshalJSON writes the options with snake_case keys and string durations.
func (o Options) MarshalJSON() ([]byte, error) {
	j := optionsJSON{
		Name: o.Name, Addr: o.Addr, Keys: o.Keys, Models: o.Models, StrictModels: o.StrictModels,
		Latency: Duration(o.Latency), ChunkDelay: Duration(o.ChunkDelay), Chunks: o.Chunks, Rules: o.Rules, MaxCalls: o.MaxCalls,
	}
	if o.RateLimit != (RateLimit{}) {
		j.RateLimit = &o.RateLimit
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads options; unknown keys are an error. Log and Clock
// are kept.
func (o *Options) UnmarshalJSON(b []byte) error {
	var j optionsJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("decode options: %w", err)
	}
	*o = Options{
		Name: j.Name, Addr: j.Addr, Keys: j.Keys, Models: j.Models, StrictModels: j.StrictModels,
		Latency: time.Duration(j.Latency), ChunkDelay: time.Duration(j.ChunkDelay), Chunks: j.Chunks,
		Rules: j.Rules, MaxCalls: j.MaxCalls, Log: o.Log, Clock: o.Clock,
	}
	if j.RateLimit != nil {
		o.RateLimit = *j.RateLimit
	}
	return nil
}

package proxy

// A request's arrival, the first stage of serve: who calls, the body read
// and checked (one pass for the fields routing reads, duplicates refused),
// the model resolved to a route its key may use and whose kind serves the
// endpoint, the Idempotency-Key and the deadline.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/clientkey"
	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/services/proxy/internal/tokens"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/provider"
)

// readFields are the top-level request fields the proxy reads or rewrites.
// A body that spells one of them twice, or in another case, is refused: the
// proxy must authorise exactly the value the upstream acts on.
var readFields = []string{"model", "stream", "stream_options"}

// streamUsageEdit sets stream_options.include_usage (stream_options become
// {"include_usage":true} when absent or not an object); streamUsageField is
// the most it adds to a body.
var streamUsageEdit = jsonfield.EditMember("stream_options", "include_usage", []byte("true"))

const streamUsageField = `"stream_options":{"include_usage":true},`

// bodyError is a request body the proxy refuses before routing.
type bodyError struct {
	code string
	msg  string
}

// accept is a request's arrival: who calls (the gateway key, or the
// gateway's own check of another request), its body read and checked, the
// model it names resolved to a route its key may use, its Idempotency-Key
// and its deadline. internal: the gateway's own request (a moderation
// check), whose caller's client was checked already. When ok is false the
// caller has its answer (err: from writing it).
func (r *request) accept(c *fiber.Ctx) (rte *route.Route, internal, ok bool, err error) {
	s, ep := r.s, r.ep
	ic := internalOf(c) // the gateway's own request (a moderation check): its caller's client, checked already
	var client *clientkey.Key
	ok = true
	if ic != nil {
		client = ic.client
	} else {
		client, ok = r.rt.clients.Load().Authenticate(&c.Request().Header)
	}
	r.client = client
	if !ok {
		r.trace.on = false // no bundle for a caller that is not one (a flood must not fill the stream)
		return nil, false, false, r.refuse(c, gwerror.InvalidAPIKey, "missing or invalid gateway API key")
	}
	body, berr := requestBody(c, s.cfg.Limits.MaxBodyBytes)
	if berr != nil {
		return nil, false, false, r.refuse(c, berr.code, berr.msg)
	}
	r.body = body
	r.tc.Read(&c.Request().Header, r.s.tracer, r.trace.on)
	r.noteRequest(c)
	var model string
	var stream bool
	if ep.op == provider.OpTranscriptions {
		r.contentType = strings.Clone(c.Get(fiber.HeaderContentType))
		model, berr = parseForm(r.body, r.contentType)
	} else {
		var p parsed
		p, berr = readBody(r.body, ep.op)
		// stream_options count for an OpenAI-format stream only.
		model, stream, r.use.callerUsage = p.model, p.stream, p.callerUsage && ep.format == provider.FormatOpenAI
	}
	if berr != nil {
		return nil, false, false, r.refuse(c, berr.code, berr.msg)
	}
	r.model, r.stream = model, stream
	rte, ok = r.rt.table.Resolve(model)
	if !ok {
		return nil, false, false, r.refuse(c, gwerror.ModelNotFound,
			fmt.Sprintf("the model `%s` does not exist on this gateway", model))
	}
	if rte.Dynamic {
		r.resolved = s.metrics.modelLabel(rte.Steps[0].Provider.Name + "/*") // callers name these: no label per name
	} else {
		r.resolved = s.metrics.modelLabel(rte.CountedAs(model))
	}
	steps := rte.Steps
	if kind, ok := wrongKind(steps, ep.op); !ok {
		return nil, false, false, r.refuse(c, gwerror.UnsupportedForKind,
			fmt.Sprintf("the model `%s` is %s", model, kindHint(kind)))
	}
	if client != nil && ic == nil && !client.Allows(model, steps) {
		r.trace.access = gwerror.ModelNotAllowed
		return nil, false, false, r.refuse(c, gwerror.ModelNotAllowed,
			fmt.Sprintf("this API key may not use the model `%s`", model))
	}
	r.takeIdempotencyKey(c)
	r.estimateInput()
	r.deadline = s.deadline(c, r.started)
	if s.cfg.Timeouts.Request > 0 {
		r.relayDeadline = r.started.Add(s.cfg.Timeouts.Request)
	}
	return rte, ic != nil, true, nil
}

// refuse answers the caller the gateway error code with msg: a request
// refused before routing.
func (r *request) refuse(c *fiber.Ctx, code, msg string) error {
	r.class = classRejected
	return sendError(c, r.ep.format, code, msg)
}

// requestBody is the request's body, decoded when the caller compressed it
// (Content-Encoding gzip, deflate, br or zstd), never to more than limit
// bytes: the server's body limit counts the bytes as sent, and a few
// kilobytes of gzip can expand to gigabytes. The error is the
// caller's answer when it cannot be read: 413 past the limit, 415 for an
// encoding the gateway does not decode, 400 for a body that does not
// decode (the code's status, gwerror).
func requestBody(c *fiber.Ctx, limit int) ([]byte, *bodyError) {
	req := c.Request()
	ce := req.Header.ContentEncoding()
	if len(ce) == 0 || strings.EqualFold(string(ce), "identity") {
		return req.Body(), nil
	}
	body, err := req.BodyUncompressedWithLimit(limit)
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return nil, &bodyError{gwerror.RequestTooLarge,
			fmt.Sprintf("the request body is larger than the limit of %d bytes once decoded (Content-Encoding %s)", limit, ce)}
	case errors.Is(err, fasthttp.ErrContentEncodingUnsupported):
		return nil, &bodyError{gwerror.UnsupportedEncoding,
			fmt.Sprintf("Content-Encoding %q is not supported: send the body as is, or gzip, deflate, br or zstd", ce)}
	}
	return nil, &bodyError{gwerror.InvalidRequest,
		fmt.Sprintf("the request body does not decode as its Content-Encoding %s says", ce)}
}

// parsed is what routing needs from a request body.
type parsed struct {
	model string
	// stream: the caller asked for a stream (of an op that streams).
	stream bool
	// callerUsage: a stream whose caller asked for its usage
	// (stream_options.include_usage is true).
	callerUsage bool
}

// readBody reads what routing needs from a request body: the model,
// whether the caller asked for a stream, and its stream_options. The body
// must be a JSON object every parser reads the same way (no duplicate keys
// at any depth). One pass validates it, checks its keys and reads them all.
func readBody(body []byte, op provider.Op) (p parsed, berr *bodyError) {
	need := requiredField(op)
	keys := [...]string{"model", "stream", "stream_options", tokenLimits[0], tokenLimits[1], tokenLimits[2], need}
	n := len(keys)
	if need == "" {
		n-- // not a key named ""
	}
	v, err := jsonfield.Strict(body, readFields, keys[:n]...)
	if berr := bodyErrorOf(err); berr != nil {
		return parsed{}, berr
	}
	model, stream, options, required := v[0], v[1], v[2], v[6] // nil: absent
	var ok bool
	if model != nil {
		p.model, ok = jsonfield.StringValue(model)
	}
	if !ok || p.model == "" {
		return parsed{}, &bodyError{gwerror.MissingModel, "the request body must name a model"}
	}
	if berr := checkModelName(p.model); berr != nil {
		return parsed{}, berr
	}
	if berr := checkRequired(op, required, required != nil); berr != nil {
		return parsed{}, berr
	}
	for i, name := range tokenLimits {
		if berr := checkTokenLimit(name, v[3+i]); berr != nil {
			return parsed{}, berr
		}
	}
	if err := jsonfield.CheckUTF8(body); err != nil {
		return parsed{}, &bodyError{gwerror.InvalidRequest, "the request body's " + err.Error()}
	}
	if stream != nil {
		switch string(stream) {
		case "true":
			p.stream = op == provider.OpChat || op == provider.OpCompletions || op == provider.OpResponses
		case "false", "null":
		default:
			return parsed{}, &bodyError{gwerror.InvalidRequest, "`stream` must be a boolean"}
		}
	}
	if p.stream && options != nil {
		p.callerUsage = jsonfield.Bool(options, "include_usage")
	}
	return p, nil
}

// tokenLimits are the request fields that bound a request's output, in
// tokens.
var tokenLimits = [...]string{"max_tokens", "max_completion_tokens", "max_output_tokens"}

// checkTokenLimit refuses a token limit v (of the field name; nil: absent)
// that is a number no upstream reads as the caller meant: beyond a 64-bit
// integer, or beyond a float's range (1e400: encoding/json refuses it,
// other parsers read infinity). Values of another type are the
// upstream's to judge. A plain integer of up to 18 digits, what callers
// send, is passed without parsing.
func checkTokenLimit(name string, v []byte) *bodyError {
	if len(v) == 0 || v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return nil
	}
	if len(v) <= 18 && !slices.ContainsFunc(v, func(c byte) bool { return c < '0' || c > '9' }) {
		return nil
	}
	if f, err := strconv.ParseFloat(string(v), 64); err == nil && math.Abs(f) < math.MaxInt64 {
		return nil
	}
	return &bodyError{gwerror.InvalidRequest, fmt.Sprintf("`%s` must be an integer, not the number %.40s", name, v)}
}

// maxModelName is the longest model name a request may give, in bytes.
// Real ids are far shorter (OpenRouter's and Hugging Face's
// "<org>/<model>:<variant>" ids run to about 100 bytes); a caller's name
// reaches hold ids (KV keys: each byte but letters, digits and '-' takes
// three), log lines, errors and debug bundles, so it is bounded long
// before any of those could be harmed by it.
const maxModelName = config.MaxModelName

// checkModelName refuses a model name routing must not see: not UTF-8, or
// longer than maxModelName.
func checkModelName(model string) *bodyError {
	if !utf8.ValidString(model) {
		return &bodyError{gwerror.MissingModel, "the model name is not valid UTF-8"}
	}
	if len(model) > maxModelName {
		return &bodyError{gwerror.InvalidRequest, fmt.Sprintf("the model name is %d bytes long; at most %d are allowed", len(model), maxModelName)}
	}
	return nil
}

// bodyErrorOf is the caller's error for what jsonfield.Strict found: a body
// that is not valid JSON, or one that parsers read differently (a key twice
// in an object, two top-level keys, or a key and one the proxy reads, that
// differ only in case).
func bodyErrorOf(err error) *bodyError {
	if err == nil {
		return nil
	}
	if de := (*jsonfield.DuplicateKeyError)(nil); errors.As(err, &de) {
		return &bodyError{gwerror.DuplicateKey, de.Error()}
	}
	if errors.Is(err, jsonfield.ErrKeyNotUTF8) {
		return &bodyError{gwerror.InvalidJSON, "the request body names a key that is not valid UTF-8"}
	}
	return &bodyError{gwerror.InvalidJSON, "the request body is not valid JSON"} // jsonfield.ErrInvalid
}

// requiredField is the top-level field a request for op must carry ("":
// none is checked).
func requiredField(op provider.Op) string {
	switch op {
	case provider.OpChat, provider.OpCountTokens:
		return "messages"
	case provider.OpEmbeddings, provider.OpModerations, provider.OpSpeech, provider.OpResponses:
		return "input"
	case provider.OpCompletions, provider.OpImages:
		return "prompt"
	}
	return ""
}

// checkRequired checks the value v (found: present) of op's required
// field.
func checkRequired(op provider.Op, v []byte, found bool) *bodyError {
	switch op {
	case provider.OpChat, provider.OpCountTokens:
		if !found || len(v) == 0 || v[0] != '[' {
			return &bodyError{gwerror.InvalidRequest, "`messages` must be an array of messages"}
		}
	case provider.OpEmbeddings, provider.OpModerations:
		if !found || string(v) == "null" {
			return &bodyError{gwerror.InvalidRequest, "`input` must be a string, an array of strings or an array of token ids"}
		}
	case provider.OpCompletions:
		if !found || string(v) == "null" {
			return &bodyError{gwerror.InvalidRequest, "`prompt` must be a string, an array of strings or an array of token ids"}
		}
	case provider.OpImages:
		if !found || len(v) == 0 || v[0] != '"' {
			return &bodyError{gwerror.InvalidRequest, "`prompt` must be a string"}
		}
	case provider.OpSpeech:
		if !found || len(v) == 0 || v[0] != '"' {
			return &bodyError{gwerror.InvalidRequest, "`input` must be the text to speak"}
		}
	case provider.OpResponses:
		// input is optional: a prompt template, or a continuation
		// (previous_response_id, conversation), may carry the turn.
		if found && string(v) != "null" && (len(v) == 0 || (v[0] != '"' && v[0] != '[')) {
			return &bodyError{gwerror.InvalidRequest, "`input` must be a string or an array of input items"}
		}
	}
	return nil
}

// maxCallerTimeout is the longest timeout a caller may state (a day): a
// larger one means "no timeout of mine".
const maxCallerTimeout = 24 * time.Hour

// deadline is when the request must be answered: the earliest of the
// caller's stated timeout (X-Stainless-Timeout, as the OpenAI and Anthropic
// SDKs send it, or X-Request-Timeout) and timeouts.request.
func (s *Service) deadline(c *fiber.Ctx, start time.Time) time.Time {
	var d time.Duration
	if s.cfg.Timeouts.Request > 0 {
		d = s.cfg.Timeouts.Request
	}
	for _, h := range [...]string{"X-Stainless-Timeout", "X-Request-Timeout"} {
		if v := c.Get(h); v != "" {
			if secs, err := strconv.ParseFloat(v, 64); err == nil && secs > 0 && !math.IsInf(secs, 0) {
				// Clamped before the conversion: 1e10 s would overflow
				// time.Duration into a negative (already past) deadline.
				cd := maxCallerTimeout
				if secs < maxCallerTimeout.Seconds() {
					cd = time.Duration(secs * float64(time.Second))
				}
				if d == 0 || cd < d {
					d = cd
				}
			}
		}
	}
	if d == 0 {
		return time.Time{}
	}
	return start.Add(d)
}

func validIdempotencyKey(k string) bool { return len(k) <= 255 && visibleASCII(k) }

// headerWarning says what the gateway did with a request other than the
// caller asked (an Idempotency-Key it ignored).
const headerWarning = "X-Switchyard-Warning"

// takeIdempotencyKey takes the caller's Idempotency-Key: a valid one goes
// upstream with the request's attempts (see idemFor); an invalid one
// (over 255 characters, or not visible ASCII) is ignored, not forwarded
// and with no replay protection, and the answer carries headerWarning
// saying so.
func (r *request) takeIdempotencyKey(c *fiber.Ctx) {
	switch k := c.Get("Idempotency-Key"); {
	case k == "":
	case validIdempotencyKey(k):
		r.idem.key = strings.Clone(k)
	default:
		c.Set(headerWarning, "Idempotency-Key ignored: it must be 1 to 255 visible ASCII characters; the request was sent without it")
	}
}

// wrongKind reports whether some step of a model can serve op: a chat
// request to an embedding model (or the reverse) is refused before any
// upstream call. Steps of unknown kind are given the benefit of the doubt.
func wrongKind(steps []route.Step, op provider.Op) (kind string, ok bool) {
	for i := range steps {
		if k := steps[i].Kind; k == "" || kindServes(k, op) {
			return "", true
		}
		kind = steps[i].Kind
	}
	return kind, len(steps) == 0
}

// kindServes reports whether a model of kind serves op: legacy completions
// on completion and chat models (OpenAI-compatible servers complete with
// their chat models), token counts on chat models.
func kindServes(kind string, op provider.Op) bool {
	switch op {
	case provider.OpEmbeddings:
		return kind == config.KindEmbedding
	case provider.OpCompletions:
		return kind == config.KindCompletion || kind == config.KindChat
	case provider.OpModerations:
		return kind == config.KindModeration
	case provider.OpImages:
		return kind == config.KindImage
	case provider.OpSpeech:
		return kind == config.KindSpeech
	case provider.OpTranscriptions:
		return kind == config.KindTranscript
	}
	return kind == config.KindChat
}

// kindHint says what a model of kind is and where to send its requests.
func kindHint(kind string) string {
	switch kind {
	case config.KindEmbedding:
		return "an embedding model: use POST /v1/embeddings"
	case config.KindCompletion:
		return "a completion model: use POST /v1/completions"
	case config.KindModeration:
		return "a moderation model: use POST /v1/moderations"
	case config.KindImage:
		return "an image model: use POST /v1/images/generations"
	case config.KindSpeech:
		return "a speech model: use POST /v1/audio/speech"
	case config.KindTranscript:
		return "a transcription model: use POST /v1/audio/transcriptions"
	}
	return "a chat model: use POST /v1/chat/completions or /v1/messages"
}

// estimateInput makes the request's one prompt estimate (r.use.estIn), before
// plan admission and selection read it.
func (r *request) estimateInput() {
	if r.ep.op != provider.OpTranscriptions { // the body is audio, not tokens
		r.use.estIn = tokens.Estimate(r.body)
	}
}

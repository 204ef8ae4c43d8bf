package failure

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// maxText bounds how much of a message or text body the classifier looks at.
const maxText = 4096

// maxDepth bounds how deep nested upstream errors are followed.
const maxDepth = 3

// signal is what one error document says, decoded once from the body. An
// OpenRouter error carries the upstream's own document in upstream.
type signal struct {
	exception  string   // AWS exception name (x-amzn-errortype, __type, stream event key)
	reasons    []string // google.rpc ErrorInfo reasons, legacy errors[].reason, Azure innererror.code
	code       string   // error.code when it is text
	inner      string   // Azure innererror.code
	typ        string   // error.type
	statusText string   // google.rpc status ("RESOURCE_EXHAUSTED")
	message    string
	numCode    int // a numeric error.code: the HTTP status the body carries

	retryDelay time.Duration // google.rpc RetryInfo
	hasDelay   bool
	modelQuota bool // a QuotaFailure violation names a model
	dayQuota   bool // a QuotaFailure violation is a per-day quota (GenerateRequestsPerDayPerProjectPerModel)
	zeroQuota  bool // a QuotaFailure violation's quota is 0: nothing is allowed, waiting does not help

	resetMS int64 // OpenRouter metadata.headers X-RateLimit-Reset (unix ms)

	upstream *signal
}

// layers returns s and its nested upstream errors, outermost first.
func (s *signal) layers() []*signal {
	var out []*signal
	for l := s; l != nil; l = l.upstream {
		out = append(out, l)
	}
	return out
}

// decodeSignal reads a body: a JSON error document in any of the providers'
// shapes, or text. It decodes the JSON once.
func decodeSignal(body []byte, depth int) *signal {
	s := &signal{}
	b := bytes.TrimSpace(body)
	if len(b) == 0 {
		return s
	}
	if b[0] != '{' && b[0] != '[' {
		s.message = clip(string(b))
		return s
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		s.message = clip(string(b))
		return s
	}
	s.fromDocument(v, depth)
	return s
}

// fromDocument fills s from a decoded JSON document.
func (s *signal) fromDocument(v any, depth int) {
	// Gemini's OpenAI-compatible endpoint wraps errors in an array:
	// [{"error":{...}}].
	if arr, ok := v.([]any); ok {
		if len(arr) == 0 {
			return
		}
		v = arr[0]
	}
	doc, ok := v.(map[string]any)
	if !ok {
		if str, ok := v.(string); ok {
			s.message = clip(str)
		}
		return
	}
	switch e := doc["error"].(type) {
	case map[string]any:
		s.fromError(e, depth)
		return
	case string:
		// Ollama {"error":"..."}, xAI {"code":"...","error":"..."}.
		s.message = clip(e)
		s.code = str(doc["code"])
		if n, ok := number(doc["code"]); ok {
			s.numCode = n
		}
		return
	}
	// An OpenAI Responses stream ends a failed response with
	// {"type":"response.failed","response":{"status":"failed","error":
	// {"code":"rate_limit_exceeded","message":"..."}}}: the error is the
	// response's, not the event's type.
	if str(doc["type"]) == "response.failed" {
		if r, ok := doc["response"].(map[string]any); ok {
			if e, ok := r["error"].(map[string]any); ok {
				s.fromError(e, depth)
				return
			}
		}
	}
	// AWS event-stream exceptions arrive as {"throttlingException":{...}}.
	if len(doc) == 1 {
		for k, inner := range doc {
			if strings.HasSuffix(k, "Exception") {
				s.exception = strings.ToUpper(k[:1]) + k[1:]
				if m, ok := inner.(map[string]any); ok {
					s.fromError(m, depth)
				}
				return
			}
		}
	}
	// The document is the error itself: Mistral, vLLM, Bedrock, Cohere, and
	// the Responses API's error event ({"type":"error","code":...}).
	s.fromError(doc, depth)
	if s.typ == "error" { // Mistral's {"object":"error", "type":...} is fine; a bare "error" type says nothing
		s.typ = ""
	}
}

// fromError reads one error object.
func (s *signal) fromError(e map[string]any, depth int) {
	s.message = clip(messageOf(e))
	if c, ok := e["code"]; ok {
		if n, ok := number(c); ok {
			s.numCode = n
		} else {
			s.code = str(c)
		}
	}
	s.typ = str(e["type"])
	s.statusText = str(e["status"])
	if t := str(e["__type"]); t != "" { // AWS JSON protocol: "com.amazon.coral.validate#ValidationException"
		if i := strings.LastIndexByte(t, '#'); i >= 0 {
			t = t[i+1:]
		}
		s.exception = t
	}
	if details, ok := e["details"].([]any); ok {
		for _, d := range details {
			s.fromDetail(d)
		}
	}
	if errs, ok := e["errors"].([]any); ok { // legacy Google errors[]
		for _, d := range errs {
			if m, ok := d.(map[string]any); ok {
				if r := str(m["reason"]); r != "" {
					s.reasons = append(s.reasons, r)
				}
			}
		}
	}
	if inner, ok := e["innererror"].(map[string]any); ok { // Azure content filter
		s.inner = str(inner["code"])
	}
	if md, ok := e["metadata"].(map[string]any); ok {
		s.fromMetadata(md, depth)
	}
}

// fromDetail reads one google.rpc detail (ErrorInfo, RetryInfo, QuotaFailure).
func (s *signal) fromDetail(d any) {
	m, ok := d.(map[string]any)
	if !ok {
		return
	}
	if r := str(m["reason"]); r != "" {
		s.reasons = append(s.reasons, r)
	}
	if rd, ok := m["retryDelay"]; ok {
		if d, ok := protoDuration(rd); ok {
			s.retryDelay, s.hasDelay = d, true
		}
	}
	if vs, ok := m["violations"].([]any); ok {
		for _, v := range vs {
			vm, ok := v.(map[string]any)
			if !ok {
				continue
			}
			if dims, ok := vm["quotaDimensions"].(map[string]any); ok && str(dims["model"]) != "" {
				s.modelQuota = true
			}
			id, metric := str(vm["quotaId"]), str(vm["quotaMetric"])
			if strings.Contains(id, "PerModel") || strings.Contains(metric, "per_model") {
				s.modelQuota = true
			}
			if strings.Contains(id, "PerDay") || strings.Contains(metric, "per_day") {
				s.dayQuota = true
			}
			if strings.TrimSpace(str(vm["quotaValue"])) == "0" {
				s.zeroQuota = true
			}
		}
	}
}

// fromMetadata reads OpenRouter's error.metadata: the upstream's own error
// in raw (a JSON string, text, or an object) and the rate-limit headers.
func (s *signal) fromMetadata(md map[string]any, depth int) {
	if h, ok := md["headers"].(map[string]any); ok {
		for k, v := range h {
			if strings.EqualFold(k, "X-RateLimit-Reset") {
				if n, err := strconv.ParseInt(str(v), 10, 64); err == nil {
					s.resetMS = n
				}
			}
		}
	}
	if depth >= maxDepth {
		return
	}
	switch raw := md["raw"].(type) {
	case string:
		if strings.TrimSpace(raw) != "" {
			s.upstream = decodeSignal([]byte(raw), depth+1)
		}
	case map[string]any, []any:
		u := &signal{}
		u.fromDocument(raw, depth+1)
		s.upstream = u
	}
}

// messageOf finds the human message of an error object. Mistral's 422 puts
// an object in message; it is kept as compact JSON text.
func messageOf(e map[string]any) string {
	for _, k := range []string{"message", "Message", "msg", "detail", "error_description"} {
		switch m := e[k].(type) {
		case string:
			return m
		case nil:
			continue
		default:
			b, err := json.Marshal(m)
			if err == nil {
				return string(b)
			}
		}
	}
	return ""
}

// str returns a JSON scalar as text.
func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

// number returns a JSON number, or a string of digits, as an int.
func number(v any) (int, bool) {
	var t string
	switch x := v.(type) {
	case json.Number:
		t = x.String()
	case string:
		t = x
	default:
		return 0, false
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 || n > 999 {
		return 0, false
	}
	return n, true
}

// protoDuration parses a google.protobuf.Duration in its JSON form ("17s",
// "0.5s") or as {"seconds":17,"nanos":0}.
func protoDuration(v any) (time.Duration, bool) {
	switch x := v.(type) {
	case string:
		return parseGoDuration(x)
	case map[string]any:
		sec, err1 := strconv.ParseFloat(str(x["seconds"]), 64)
		nanos, _ := strconv.ParseFloat(str(x["nanos"]), 64)
		if err1 != nil {
			return 0, false
		}
		return secondsToDuration(sec + nanos/1e9)
	}
	return 0, false
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > maxText {
		s = s[:maxText]
	}
	return s
}

package failure

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"switchyard.dev/shared/jsonfield"
)

// WireInput is the JSON form of an Input, as `swctl classify` reads it:
//
//	{"provider": "openai", "status": 429, "headers": {"retry-after": "20"},
//	 "body": {...} or "text", "stream": false, "error": "transport error text"}
type WireInput struct {
	Provider string                     `json:"provider"`
	Status   *int                       `json:"status"`
	Headers  map[string]json.RawMessage `json:"headers"`
	Body     json.RawMessage            `json:"body"`
	Stream   bool                       `json:"stream"`
	Error    string                     `json:"error"`
}

// DecodeWire parses one JSON wire input into an Input. A JSON string body
// is taken as the body's text (which may itself be JSON); any other JSON
// value is the body. Header values may be strings, numbers or arrays of
// strings. The input is read strictly, as the admin API reads its bodies:
// a field it does not know ("statuz"), a key named twice or in two
// spellings ({"status":429,"Status":401}: encoding/json takes the last,
// case-insensitively) and anything after the object are errors, never an
// input silently classified as something else.
func DecodeWire(line []byte) (Input, error) {
	var w WireInput
	if err := jsonfield.DecodeStrict(line, &w); err != nil {
		var dk *jsonfield.DuplicateKeyError
		switch {
		case errors.Is(err, jsonfield.ErrTrailing):
			return Input{}, errors.New("decode input: trailing data after the object")
		case errors.As(err, &dk) && dk.Depth == 0:
			return Input{}, fmt.Errorf("decode input: the field %q is named more than once (or in two spellings)", dk.Key)
		case errors.As(err, &dk):
			return Input{}, fmt.Errorf("decode input: the key %q is named twice in one object", dk.Key)
		}
		return Input{}, fmt.Errorf("decode input: %w", err)
	}
	in := Input{Provider: w.Provider, Stream: w.Stream}
	if w.Status != nil {
		if *w.Status < 0 || *w.Status > 999 {
			return Input{}, fmt.Errorf("status %d out of range", *w.Status)
		}
		in.Status = *w.Status
	}
	if w.Error != "" {
		in.Err = errors.New(w.Error)
	}
	if len(w.Headers) > 0 {
		in.Header = make(http.Header, len(w.Headers))
		for k, raw := range w.Headers {
			vals, err := headerValues(raw)
			if err != nil {
				return Input{}, fmt.Errorf("header %q: %w", k, err)
			}
			for _, v := range vals {
				in.Header.Add(k, v)
			}
		}
	}
	body := bytes.TrimSpace(w.Body)
	switch {
	case len(body) == 0 || bytes.Equal(body, []byte("null")):
	case body[0] == '"':
		var s string
		if err := json.Unmarshal(body, &s); err != nil {
			return Input{}, fmt.Errorf("body: %w", err)
		}
		in.Body = []byte(s)
	default:
		in.Body = body
	}
	return in, nil
}

func headerValues(raw json.RawMessage) ([]string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []string{s}, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return []string{n.String()}, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		return ss, nil
	}
	return nil, errors.New("want a string, a number or an array of strings")
}

// WireResult is the JSON form of a Result, as `swctl classify` prints it.
// retry_after_ms is null when the provider stated no wait; rule and
// hold_ttl_ms appear only when an operator rule decided. action is what the
// proxy does next (under the retry policy, with WireFor); holds and soft
// are the class's Meaning: whether the failure holds its target, whether
// that hold is soft.
type WireResult struct {
	Class        Class  `json:"class"`
	Scope        Scope  `json:"scope"`
	RetryAfterMS *int64 `json:"retry_after_ms"`
	Code         string `json:"code"`
	Reason       string `json:"reason"`
	Rule         string `json:"rule,omitempty"`
	HoldTTLMS    *int64 `json:"hold_ttl_ms,omitempty"`
	Action       string `json:"action"`
	Holds        bool   `json:"holds"`
	Soft         bool   `json:"soft"`
}

// Wire returns the JSON form of r, its action the class's (Meaning).
func (r Result) Wire() WireResult {
	return r.wire(r.Class.Meaning().Action)
}

// WireFor returns the JSON form of r for the input it was classified from,
// its action what the proxy does under the retry policy p (ActionFor).
func (r Result) WireFor(in Input, p RetryPolicy) WireResult {
	status := in.Status
	if in.Err != nil {
		status = 0
	}
	act := r
	if status == 0 && !in.Stream && len(in.Body) == 0 {
		// No answer at all: the proxy takes it for transient whatever a
		// rule made of it (a transport error says nothing about the
		// target).
		act.Class = Transient
	}
	return r.wire(act.ActionFor(status, in.Stream, p))
}

func (r Result) wire(a Action) WireResult {
	m := r.Class.Meaning()
	w := WireResult{Class: r.Class, Scope: r.Scope, Code: r.Code, Reason: r.Reason, Rule: r.Rule,
		Action: a.String(), Holds: m.Holds, Soft: m.Soft}
	if r.HasWait {
		ms := r.RetryAfter.Milliseconds()
		w.RetryAfterMS = &ms
	}
	if r.Rule != "" && r.HoldTTL > 0 {
		ms := r.HoldTTL.Milliseconds()
		w.HoldTTLMS = &ms
	}
	return w
}

// WireError is the line printed for an input that could not be read.
type WireError struct {
	Error string `json:"error"`
}

// LineError names the line of a JSON Lines input that failed.
func LineError(line int, err error) WireError {
	return WireError{Error: "line " + strconv.Itoa(line) + ": " + err.Error()}
}

package cache

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"testing"
)

// canonicalReference is the canonical form made with encoding/json (the
// first implementation): Canonical must say the same of every body it
// accepts, and refuse what it refuses.
func canonicalReference(body []byte, withUser bool) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("cache: trailing data after the body")
	}
	top, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("cache: the body is not a JSON object")
	}
	for _, k := range ignored {
		delete(top, k)
	}
	if !withUser {
		delete(top, "user")
	}
	return appendReference(make([]byte, 0, len(body)), v)
}

func appendReference(b []byte, v any) ([]byte, error) {
	var err error
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, k)
			b = append(b, ':')
			if b, err = appendReference(b, x[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendReference(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return strconv.AppendInt(b, n, 10), nil
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, errors.New("cache: a number out of range")
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.AppendInt(b, int64(f), 10), nil
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64), nil
	case string:
		return strconv.AppendQuote(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case nil:
		return append(b, "null"...), nil
	}
	return nil, errors.New("cache: unexpected JSON value")
}

// TestCanonicalMatchesReference: the canonicaliser says what the
// encoding/json one said of bodies with every kind of value, escape and
// number form; Key allocates the key alone.
func TestCanonicalMatchesReference(t *testing.T) {
	for _, body := range canonSeeds {
		checkCanonical(t, []byte(body))
	}
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"what is 2+2? \u00e9"}],"temperature":0.7,"max_tokens":100,"stream":true}`)
	if _, err := Key("chain:x", "team", "/v1/chat/completions", body, false); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = Key("chain:x", "team", "/v1/chat/completions", body, false) }); n > 1 && !raceEnabled {
		t.Errorf("Key: %v allocations, want 1 (the key)", n)
	}
}

var canonSeeds = []string{
	`{}`, `{"a":1}`, `{"b":1,"a":2}`, `{"a":1,"a":2}`, `{"b":{"d":[1,2,{"z":null,"y":true}],"c":false},"a":"x"}`,
	`{"model":"a","stream":true,"stream_options":{"include_usage":true},"user":"u","messages":[]}`,
	`{"n":[0,-0,1.0,1e0,1E2,-1.5e-3,12345678901234567890,9007199254740993,0.1,1e308,-0.0,100e-2]}`,
	`{"s":"\u00e9\n\t\"\\\/\b\f\r\u0000\ud83d\ude00\ud800x\udc00\ud800\u0041"}`,
	"{\"s\":\"\xff\xfe ok \xe2\x82\"}", `{"é":1,"e":2,"\u00e9":3}`, ` { "a" : [ ] , "b" : { } } `,
	`{"a":1} {"b":2}`, `[1]`, `{"a":`, `{"n":1e999}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":tru}`, `{"a":"x}`, `{"a":1,}`,
	`{"a" 1}`, `{"a":1}x`, `{"a":"\x"}`, `{"a":"\u12"}`, "{\"a\":\"\x01\"}", ``, `   `, `"x"`,
}

func checkCanonical(t *testing.T, body []byte) {
	t.Helper()
	for _, withUser := range []bool{false, true} {
		got, err := Canonical(body, withUser)
		want, werr := canonicalReference(body, withUser)
		switch {
		case err == nil && werr != nil:
			t.Errorf("%q: accepted (%s), the reference refused it: %v", body, got, werr)
		case err != nil && werr == nil && json.Valid(body):
			t.Errorf("%q: refused (%v), the reference made %s", body, err, want)
		case err == nil && !bytes.Equal(got, want):
			t.Errorf("%q:\n got %s\nwant %s", body, got, want)
		}
	}
}

func FuzzCanonical(f *testing.F) {
	for _, s := range canonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkCanonical(t, body) })
}

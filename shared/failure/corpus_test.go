package failure

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/redact"
)

var update = flag.Bool("update", false, "rewrite the expected results of testdata/corpus (review the diff!)")

// corpusNow is the clock for corpus cases with HTTP-date or RFC 3339 waits.
var corpusNow = time.Date(2025, 6, 2, 12, 0, 0, 0, time.UTC)

// corpusCase is one real provider error: where it is documented or
// reported, what the gateway saw, and what the classifier must make of it.
type corpusCase struct {
	Name     string            `json:"name"`
	Provider string            `json:"provider"`
	Source   string            `json:"source"`
	Note     string            `json:"note,omitempty"`
	Status   int               `json:"status"`
	Headers  map[string]string `json:"headers,omitempty"`
	Body     json.RawMessage   `json:"body,omitempty"`
	Stream   bool              `json:"stream,omitempty"`
	Error    string            `json:"error,omitempty"`
	Expected corpusExpected    `json:"expected"`
}

type corpusExpected struct {
	Class        Class  `json:"class"`
	Scope        Scope  `json:"scope"`
	RetryAfterMS *int64 `json:"retry_after_ms"`
	Code         string `json:"code"`
}

func (c corpusCase) input(t *testing.T) Input {
	t.Helper()
	in := Input{Provider: c.Provider, Status: c.Status, Stream: c.Stream}
	if len(c.Headers) > 0 {
		in.Header = http.Header{}
		for k, v := range c.Headers {
			in.Header.Set(k, v)
		}
	}
	if c.Error != "" {
		in.Err = errors.New(c.Error)
	}
	if b := bytes.TrimSpace(c.Body); len(b) > 0 {
		if b[0] == '"' {
			var s string
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatalf("body: %v", err)
			}
			in.Body = []byte(s)
		} else {
			in.Body = b
		}
	}
	return in
}

func expectedOf(r Result) corpusExpected {
	w := r.Wire()
	return corpusExpected{Class: r.Class, Scope: r.Scope, RetryAfterMS: w.RetryAfterMS, Code: r.Code}
}

func loadCorpus(t *testing.T) map[string]corpusCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]corpusCase{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c corpusCase
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cases[f] = c
	}
	return cases
}

// The corpus's minimum size: cases, provider types (one directory each; a
// provider the classifier does not know by type is classified as a real
// deployment would configure it, usually openai-compatible) and the error
// families those types map to.
const (
	minCorpusCases    = 200
	minCorpusTypes    = 18
	minCorpusFamilies = 10
)

func TestCorpus(t *testing.T) {
	cases := loadCorpus(t)
	if len(cases) < minCorpusCases {
		t.Errorf("corpus has %d cases, want at least %d", len(cases), minCorpusCases)
	}
	types := map[string]bool{}
	for f := range cases {
		types[filepath.Base(filepath.Dir(f))] = true
	}
	if len(types) < minCorpusTypes {
		t.Errorf("corpus covers %d provider types, want at least %d", len(types), minCorpusTypes)
	}
	providers := map[string]bool{}
	files := make([]string, 0, len(cases))
	for f := range cases {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		c := cases[f]
		providers[Family(c.Provider)] = true
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			if c.Name == "" || c.Provider == "" || !strings.HasPrefix(c.Source, "https://") {
				t.Errorf("%s: a case needs name, provider and an https source", f)
			}
			got := expectedOf(ClassifyAt(c.input(t), corpusNow))
			if *update {
				if !equalExpected(got, c.Expected) {
					c.Expected = got
					b, err := json.MarshalIndent(c, "", "  ")
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(f, append(b, '\n'), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			if !equalExpected(got, c.Expected) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(c.Expected)
				t.Errorf("%s\n got  %s\n want %s", f, g, w)
			}
		})
	}
	if len(providers) < minCorpusFamilies {
		t.Errorf("corpus covers %d provider families, want at least %d", len(providers), minCorpusFamilies)
	}
}

func equalExpected(a, b corpusExpected) bool {
	if a.Class != b.Class || a.Scope != b.Scope || a.Code != b.Code {
		return false
	}
	if (a.RetryAfterMS == nil) != (b.RetryAfterMS == nil) {
		return false
	}
	return a.RetryAfterMS == nil || *a.RetryAfterMS == *b.RetryAfterMS
}

// TestCorpusReasonsNotMasked: the reason recorded for a real provider
// error (in hold records, events, logs) is masked only where it held a
// credential: ordinary codes and messages ("unsupported_country_region_
// territory", resource paths, model names) stay readable.
func TestCorpusReasonsNotMasked(t *testing.T) {
	for f, c := range loadCorpus(t) {
		res := ClassifyAt(c.input(t), corpusNow)
		for _, s := range []string{res.Reason, res.Code} {
			if m := redact.String(s); m != s {
				t.Errorf("%s: %q masked as %q", filepath.Base(f), s, m)
			}
		}
	}
}

// TestCorpusAsWireInput: each corpus case, its annotations removed (what
// tools/README.md pipes to swctl classify: jq 'del(.name, .source, .note,
// .expected)'), is a wire input DecodeWire accepts, classified as expected.
func TestCorpusAsWireInput(t *testing.T) {
	for f, c := range loadCorpus(t) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, k := range []string{"name", "source", "note", "expected"} {
			delete(m, k)
		}
		line, _ := json.Marshal(m)
		in, err := DecodeWire(line)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if got := expectedOf(ClassifyAt(in, corpusNow)); !reflect.DeepEqual(got, c.Expected) {
			t.Errorf("%s: as wire input %+v, want %+v", f, got, c.Expected)
		}
	}
}

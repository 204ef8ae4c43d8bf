package fakeprovider

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    Options
		wantErr string
	}{
		{name: "empty", yaml: "", want: Options{}},
		{
			name: "full",
			yaml: `
name: openai-eu
addr: 127.0.0.1:9101
keys: [sk-a, sk-b]
models: [gpt-4o-mini]
strict_models: true
latency: 20ms
chunk_delay: 15ms
chunks: 8
rules:
  - id: quota
    key: sk-b
    error: openai.insufficient_quota
  - model: gpt-4o-mini
    path: /chat/completions
    probability: 0.1
    error: openai.rate_limit
    retry_after: 2s
  - cut_after: 3
    times: 1
    first_byte_latency: 1s
`,
			want: Options{
				Name: "openai-eu", Addr: "127.0.0.1:9101", Keys: []string{"sk-a", "sk-b"}, Models: []string{"gpt-4o-mini"},
				StrictModels: true, Latency: 20 * time.Millisecond, ChunkDelay: 15 * time.Millisecond, Chunks: 8,
				Rules: []Rule{
					{ID: "quota", Key: "sk-b", Error: "openai.insufficient_quota"},
					{Model: "gpt-4o-mini", Path: "/chat/completions", Probability: 0.1, Error: "openai.rate_limit", RetryAfter: 2 * time.Second},
					{CutAfter: 3, Times: 1, FirstByteLatency: time.Second},
				},
			},
		},
		{name: "unknown key", yaml: "latncy: 1s\n", wantErr: "latncy"},
		{name: "bad duration", yaml: "latency: soon\n", wantErr: "soon"},
		{name: "unknown error name", yaml: "rules:\n  - error: openai.nope\n", wantErr: "rules[0].error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseOptions([]byte(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestLoadOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fake.yaml")
	if err := os.WriteFile(path, []byte("name: x\nchunks: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := LoadOptions(path)
	if err != nil || o.Name != "x" || o.Chunks != 2 {
		t.Fatalf("LoadOptions = %+v, %v", o, err)
	}
	if _, err := LoadOptions(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("LoadOptions of a missing file succeeded")
	}
}

func TestMaxCalls(t *testing.T) {
	s := New(Options{Name: "cap", MaxCalls: 4})
	defer s.Close()
	for i := range 9 {
		s.record(Call{Model: strconv.Itoa(i)})
	}
	calls := s.Calls()
	if len(calls) > 4 || calls[len(calls)-1].Model != "8" {
		t.Errorf("kept %+v", calls)
	}
}

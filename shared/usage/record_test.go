package usage

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/hold"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// sampleRecord is a streamed request with a known price.
func sampleRecord() Record {
	tokens := AnthropicUsage(12, 3000, 500, 400)
	usd, _ := NewTable(Defaults(), nil).Cost("anthropic-main", "anthropic", "claude-sonnet-4-5-20250929", tokens)
	return Record{
		V:               SchemaVersion,
		RequestID:       "req_01J9",
		At:              time.Date(2026, 9, 1, 12, 30, 15, 123456789, time.UTC),
		ClientID:        "team-a",
		Plan:            "pro",
		ClientType:      ClientClaudeCode,
		Endpoint:        "/v1/messages",
		ModelRequested:  "claude-sonnet-4-5",
		Provider:        "anthropic-main",
		ProviderType:    "anthropic",
		Model:           "claude-sonnet-4-5-20250929",
		KeyID:           "k2",
		Attempts:        2,
		FailedAttempts:  []FailedAttempt{{Provider: "anthropic-main", Model: "claude-sonnet-4-5-20250929", KeyID: "k1", Class: "rate_limit"}},
		Status:          200,
		Tokens:          tokens,
		CostUSD:         &usd,
		LatencyMS:       2345.5,
		TTFTMS:          410.25,
		Stream:          true,
		StreamCompleted: true,
	}
}

// TestRecordGolden pins the JSON form of schema version 1: field names,
// order and encodings. Run with -update to rewrite testdata/record_v1.json
// after a deliberate change (which, unless it only adds fields, also
// raises SchemaVersion).
func TestRecordGolden(t *testing.T) {
	got, err := json.MarshalIndent(sampleRecord(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "record_v1.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("record JSON changed:\n got %s\nwant %s", got, want)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	known := sampleRecord()
	unknown := sampleRecord()
	unknown.CostUSD = nil
	unknown.Status, unknown.Class, unknown.Cancelled, unknown.StreamCompleted = 502, "transient", true, false
	for _, tt := range []struct {
		name string
		rec  Record
	}{{"known cost", known}, {"unknown cost", unknown}, {"zero record", Record{}}} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.rec)
			if err != nil {
				t.Fatal(err)
			}
			var back Record
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !back.At.Equal(tt.rec.At) {
				t.Errorf("at: %v, want %v", back.At, tt.rec.At)
			}
			back.At, tt.rec.At = time.Time{}, time.Time{}
			if !reflect.DeepEqual(back, tt.rec) {
				t.Errorf("round trip:\n got %+v\nwant %+v", back, tt.rec)
			}
		})
	}
}

// TestRecordCostNull checks that an unknown cost is null on the wire, stays
// null through a round trip, and that a zero cost stays 0 (a free model is
// not an unknown one).
func TestRecordCostNull(t *testing.T) {
	rec := sampleRecord()
	rec.CostUSD = nil
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"cost_usd":null`) {
		t.Fatalf("unknown cost not null: %s", b)
	}
	var back Record
	if err := json.Unmarshal(b, &back); err != nil || back.CostUSD != nil {
		t.Fatalf("unknown cost after round trip: %v, %v", back.CostUSD, err)
	}
	again, _ := json.Marshal(back)
	if !strings.Contains(string(again), `"cost_usd":null`) {
		t.Errorf("second marshal lost null: %s", again)
	}

	zero := 0.0
	rec.CostUSD = &zero
	b, _ = json.Marshal(rec)
	if !strings.Contains(string(b), `"cost_usd":0`) {
		t.Fatalf("zero cost: %s", b)
	}
	back = Record{}
	if err := json.Unmarshal(b, &back); err != nil || back.CostUSD == nil || *back.CostUSD != 0 {
		t.Errorf("zero cost after round trip: %v, %v", back.CostUSD, err)
	}
}

// TestRecordFieldsAllPresent checks that the zero Record still writes every
// field in snake_case, but the guardrail and cache ones (written when a
// guardrail acted, when a cache policy applied: most requests have none).
func TestRecordFieldsAllPresent(t *testing.T) {
	b, err := json.Marshal(Record{})
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	want := []string{"v", "request_id", "at", "client_id", "plan", "client_type", "endpoint", "model_requested",
		"provider", "provider_type", "model", "key_id", "attempts", "status", "class", "tokens",
		"tokens_estimated", "cost_usd", "latency_ms", "ttft_ms", "stream", "stream_completed", "cancelled", "failed_attempts"}
	if len(fields) != len(want) {
		t.Errorf("%d fields, want %d: %s", len(fields), len(want), b)
	}
	for _, k := range want {
		if _, ok := fields[k]; !ok {
			t.Errorf("field %q missing: %s", k, b)
		}
	}
	if string(fields["tokens"]) != `{"input":0,"output":0,"cached_input":0,"cache_write":0,"reasoning":0}` {
		t.Errorf("tokens = %s", fields["tokens"])
	}
}

func TestSubject(t *testing.T) {
	tests := []struct {
		name, provider, client, want string
	}{
		{"plain names", "openai", "team-a", "switchyard.usage.openai.team-a"},
		{"underscore stays, as in event subjects", "openai_eu", "svc_1", "switchyard.usage.openai_eu.svc_1"},
		{"empty provider (no attempt)", "", "team-a", "switchyard.usage._.team-a"},
		{"empty client (unauthenticated)", "openai", "", "switchyard.usage.openai._"},
		{"a name that is exactly _", "_", "_", "switchyard.usage.=5F.=5F"},
		{"dot, star, gt and space encoded", "a.b", "c* >d", "switchyard.usage.a=2Eb.c=2A=20=3Ed"},
		{"equals sign encoded", "a=b", "x", "switchyard.usage.a=3Db.x"},
		{"non-ASCII bytes encoded", "é", "x", "switchyard.usage.=C3=A9.x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Subject(tt.provider, tt.client)
			if got != tt.want {
				t.Fatalf("Subject(%q, %q) = %q, want %q", tt.provider, tt.client, got, tt.want)
			}
			parts := strings.Split(got, ".")
			if len(parts) != 4 || parts[0]+"."+parts[1] != SubjectPrefix {
				t.Fatalf("%q is not four tokens under %s", got, SubjectPrefix)
			}
			for i, orig := range []string{tt.provider, tt.client} {
				if dec := decodeSubjectToken(t, parts[2+i]); dec != orig {
					t.Errorf("token %q decodes to %q, want %q", parts[2+i], dec, orig)
				}
			}
		})
	}
}

// decodeSubjectToken reverses subjectToken: "_" is empty, anything else is
// hold.DecodeToken's (the same escape).
func decodeSubjectToken(t *testing.T, tok string) string {
	t.Helper()
	if tok == "_" {
		return ""
	}
	s, err := hold.DecodeToken(tok)
	if err != nil {
		t.Fatalf("decode %q: %v", tok, err)
	}
	return s
}

// FuzzSubject checks that any pair of names gives a four-token subject of
// allowed bytes that decodes back to the names.
func FuzzSubject(f *testing.F) {
	for _, s := range []string{"", "_", "openai", "a.b", "=5F", "x y>*", "é"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, provider, client string) {
		subject := Subject(provider, client)
		parts := strings.Split(subject, ".")
		if len(parts) != 4 {
			t.Fatalf("%q: %d tokens", subject, len(parts))
		}
		for i, orig := range []string{provider, client} {
			tok := parts[2+i]
			for j := 0; j < len(tok); j++ {
				if !tokenByte(tok[j]) && tok[j] != '=' {
					t.Fatalf("%q: byte %q in token %q", subject, tok[j], tok)
				}
			}
			if dec := decodeSubjectToken(t, tok); dec != orig {
				t.Fatalf("%q: token %q decodes to %q, want %q", subject, tok, dec, orig)
			}
		}
	})
}

// TestAppendJSON: AppendJSON writes what encoding/json writes for a
// Record, byte for byte.
func TestAppendJSON(t *testing.T) {
	c, tiny := 0.0153, 1.5e-9
	recs := []Record{
		{},
		{V: 1, RequestID: "req_1", At: time.Date(2026, 11, 30, 12, 31, 2, 114000000, time.UTC), ClientID: "team-a", Plan: "pro",
			ClientType: "claude-code", Endpoint: "/v1/messages", ModelRequested: "claude-sonnet", Provider: "anthropic-main",
			ProviderType: "anthropic", Model: "claude-sonnet-4-20250514", KeyID: "k2", Attempts: 1, Status: 200,
			Tokens: Tokens{Input: 1840, Output: 412, CachedInput: 12000, CacheWrite: 3, Reasoning: 9}, CostUSD: &c,
			LatencyMS: 5231.4, TTFTMS: 812.7, Stream: true, StreamCompleted: true,
			FailedAttempts: []FailedAttempt{{Provider: "anthropic-main", Model: "claude-sonnet-4-20250514", KeyID: "k1", Class: "transient"},
				{Provider: "openai\"x", Model: "gpt-4.1", KeyID: "", Class: "unrecognised", Cancelled: true}}},
		{V: 1, RequestID: "caller's \"id\" <x> & \\ \u2028 é \x01", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)),
			ModelRequested: "openrouter/auto:free\xff", Class: "credential_rejected", Status: 401, CostUSD: &tiny, LatencyMS: 1e22, Cancelled: true},
		{V: 1, Status: 400, Class: "rejected", Guardrail: "block", GuardrailName: "no-word", GuardrailStage: "output"},
		{V: 1, Status: 200, Cache: "hit", CacheSavedUSD: &c},
	}
	for i, r := range recs {
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.AppendJSON(nil); string(got) != string(want) {
			t.Errorf("record %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	c := 0.0153
	r := Record{V: 1, RequestID: "req_3f0c9a2b6d1e4f5a6b7c8d9e", At: time.Now(), ClientID: "team-a", Plan: "pro",
		ClientType: "claude-code", Endpoint: "/v1/messages", ModelRequested: "claude-sonnet", Provider: "anthropic-main",
		ProviderType: "anthropic", Model: "claude-sonnet-4-20250514", KeyID: "k2", Attempts: 1, Status: 200,
		Tokens: Tokens{Input: 1840, Output: 412, CachedInput: 12000}, CostUSD: &c, LatencyMS: 5231.4, TTFTMS: 812.7}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = r.AppendJSON(buf[:0])
	}
}

package admin

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"switchyard.dev/shared/usage"
)

// decodeSeeds are records as the proxies write them, and what else may
// reach the stream: escapes, other cases, nulls, duplicates, unknown and
// nested fields, numbers of every form, garbage.
func decodeSeeds() [][]byte {
	full, _ := json.Marshal(rec("s1", time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC), func(r *usage.Record) {
		r.Stream, r.StreamCompleted, r.TTFTMS, r.Cancelled, r.TokensEstimated = true, true, 12.5, true, true
		r.Tokens = usage.Tokens{Input: 1, Output: 2, CachedInput: 3, CacheWrite: 4, Reasoning: 5}
		r.FailedAttempts = []usage.FailedAttempt{{Provider: "p1", Model: "m", KeyID: "k1", Class: "transient"},
			{Provider: "p2", Model: "m2", KeyID: "k2", Class: "rate_limit", Cancelled: true}}
		r.Guardrail, r.GuardrailName, r.GuardrailStage = "redact", "no-cards", "input"
		r.Cache, r.CacheSavedUSD = "hit", cost(0.25)
	}))
	unknownCost, _ := json.Marshal(rec("s2", time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), func(r *usage.Record) { r.CostUSD = nil }))
	seeds := [][]byte{full, unknownCost}
	for _, s := range []string{
		`{}`, `null`, `[]`, `{"v":1}`, ` { "v" : 1 , "status" : 429 } `, `{"v":1}x`, `{"v":1,}`,
		`{"v":1,"client_id":"a\"b"}`, `{"v":1,"client_id":"caf\u00e9"}`, "{\"v\":1,\"model\":\"caf\xc3\xa9\"}",
		"{\"v\":1,\"model\":\"\xff\"}", "{\"v\":1,\"model\":\"a\tb\"}",
		`{"V":1,"Status":500}`, `{"v":1,"STATUS":500,"status":200}`, `{"status":200,"Status":500}`, `{"\u0076":1}`,
		`{"v":1,"status":200,"status":null}`, `{"v":null,"at":null,"tokens":null,"cost_usd":null,"stream":null}`,
		`{"v":1,"cost_usd":1,"cost_usd":null}`, `{"v":1,"cost_usd":null,"cost_usd":0.5}`,
		`{"v":1.0}`, `{"v":1e0}`, `{"v":-0}`, `{"v":01}`, `{"v":9223372036854775808}`, `{"v":"1"}`,
		`{"v":1,"latency_ms":-0.0}`, `{"v":1,"latency_ms":1e400}`, `{"v":1,"latency_ms":1E-3}`, `{"v":1,"latency_ms":.5}`,
		`{"v":1,"latency_ms":1.}`, `{"v":1,"latency_ms":+1}`, `{"v":1,"latency_ms":-}`,
		`{"v":1,"tokens":{"input":5,"INPUT":6}}`, `{"v":1,"tokens":{"input":5,"extra":{"a":[1,{"b":null}]}}}`,
		`{"v":1,"tokens":[]}`, `{"v":1,"tokens":{"input":1.5}}`,
		`{"v":1,"extra":[1,"two",{"three":true},[false,null]],"more":{}}`, `{"v":1,"extra":"x\ny"}`,
		`{"v":1,"at":"2026-11-30T12:00:00Z"}`, `{"v":1,"at":"2026-11-30 12:00:00"}`, `{"v":1,"at":"2026-11-30T24:00:00Z"}`,
		`{"v":1,"at":5}`, `{"v":1,"stream":1}`, `{"v":1,"stream":truex}`, `{"v":1,"stream":tru}`,
		`{"v":1,"failed_attempts":[]}`, `{"v":1,"failed_attempts":[null,{"provider":"p","cancelled":true,"x":1}]}`,
		`{"v":1,"failed_attempts":[{"provider":"a"}],"failed_attempts":null}`, `{"v":1,"failed_attempts":{}}`,
		`{"v":1,"failed_attempts":[{"Provider":"a"}]}`, `{"v":1,"failed_attempts":[{"provider":"a"},]}`,
		`{"v":1,"guardrail":"block","guardrail_name":"g","guardrail_stage":"output"}`, `{"v":1,"guardrail":null}`, `{"v":1,"cache":"hit","cache_saved_usd":null}`, `{"v":1,"cache_saved_usd":"x"}`, `{"v":1,"Guardrail":"x"}`,
		`{"v":1,"client_id":5}`, `{"v":1 "status":1}`, `{"v":1,"status":200`, ``, `{`, `"v"`,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// FuzzDecodeRecord: decodeRecord gives what json.Unmarshal gives, and its
// direct reading never accepts what json.Unmarshal refuses.
func FuzzDecodeRecord(f *testing.F) {
	for _, s := range decodeSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, std, got usage.Record
		fastOK := decodeRecordFast(data, &fast)
		stdErr := json.Unmarshal(data, &std)
		if fastOK && (stdErr != nil || !reflect.DeepEqual(fast, std)) {
			t.Fatalf("%q:\nfast %+v\nstd  %+v (%v)", data, fast, std, stdErr)
		}
		err := decodeRecord(data, &got)
		if (err == nil) != (stdErr == nil) || err == nil && !reflect.DeepEqual(got, std) {
			t.Fatalf("%q: decodeRecord %+v (%v), json.Unmarshal %+v (%v)", data, got, err, std, stdErr)
		}
	})
}

// TestDecodeRecordFastPath: what the proxies write is read directly.
func TestDecodeRecordFastPath(t *testing.T) {
	for _, s := range decodeSeeds()[:2] {
		var r usage.Record
		if !decodeRecordFast(s, &r) {
			t.Errorf("not read directly: %s", s)
		}
	}
}

func BenchmarkDecodeRecord(b *testing.B) {
	data := decodeSeeds()[0]
	for _, bm := range []struct {
		name string
		f    func([]byte, *usage.Record) error
	}{
		{"direct", decodeRecord},
		{"encoding_json", func(d []byte, r *usage.Record) error { return json.Unmarshal(d, r) }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r usage.Record
				if err := bm.f(data, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package failure

import (
	"encoding/json"
	"testing"
)

func TestWireRoundTrip(t *testing.T) {
	tests := []struct {
		name, line, want string
	}{
		{"object body and headers",
			`{"provider":"openai","status":429,"headers":{"retry-after":"20","x-other":["a","b"]},"body":{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}}`,
			`{"class":"quota_exhausted","scope":"key","retry_after_ms":20000,"code":"insufficient_quota","reason":"provider code insufficient_quota","action":"rotate","holds":true,"soft":false}`},
		{"string body holding JSON, numeric header",
			`{"provider":"anthropic","status":529,"headers":{"retry-after":3},"body":"{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}"}`,
			`{"class":"transient","scope":"none","retry_after_ms":3000,"code":"overloaded_error","reason":"provider code overloaded_error","action":"retry_same","holds":false,"soft":true}`},
		{"transport error, null status",
			`{"provider":"openai","status":null,"error":"dial tcp: connection refused"}`,
			`{"class":"transient","scope":"none","retry_after_ms":null,"code":"connection_refused","reason":"transport: connection refused","action":"retry_same","holds":false,"soft":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := DecodeWire([]byte(tt.line))
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(ClassifyAt(in, testNow).Wire())
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestDecodeWireErrors(t *testing.T) {
	for _, line := range []string{`{`, `[]`, `{"status":"429"}`, `{"status":1000}`, `{"headers":{"a":{"b":1}}}`, `{} {}`,
		// strict: an unknown field, a key twice or in two spellings,
		// anything after the object (each was classified before)
		`{"statuz":429,"body":"x"}`, `{"status":429,"status":200}`, `{"status":429,"Status":401}`,
		`{"STATUS":401}`, `{"status":429}]`, `{"status":429,"body":{"error":{"code":"a","code":"b"}}}`,
	} {
		if _, err := DecodeWire([]byte(line)); err == nil {
			t.Errorf("DecodeWire(%s): no error", line)
		}
	}
}

func TestClassJSON(t *testing.T) {
	b, err := json.Marshal(struct {
		C Class
		S Scope
	}{RegionBlocked, ScopeKeyModel})
	if err != nil || string(b) != `{"C":"region_blocked","S":"key+model"}` {
		t.Fatalf("marshal = %s, %v", b, err)
	}
	var v struct {
		C Class
		S Scope
	}
	if err := json.Unmarshal(b, &v); err != nil || v.C != RegionBlocked || v.S != ScopeKeyModel {
		t.Fatalf("unmarshal = %+v, %v", v, err)
	}
	if err := json.Unmarshal([]byte(`{"C":"nope"}`), &v); err == nil {
		t.Fatal("unknown class decoded")
	}
}

func TestDescribe(t *testing.T) {
	for _, tt := range []struct{ body, code, typ, msg string }{
		{`{"error":{"message":"Incorrect API key provided: sk-x","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			"invalid_api_key", "invalid_request_error", "Incorrect API key provided: sk-x"},
		{`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "", "overloaded_error", "Overloaded"},
		{`{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT"}}`, "INVALID_ARGUMENT", "", "API key not valid."},
		{`upstream connect error`, "", "", "upstream connect error"},
		{``, "", "", ""},
	} {
		code, typ, msg := Describe([]byte(tt.body))
		if code != tt.code || typ != tt.typ || msg != tt.msg {
			t.Errorf("Describe(%s) = %q %q %q, want %q %q %q", tt.body, code, typ, msg, tt.code, tt.typ, tt.msg)
		}
	}
}

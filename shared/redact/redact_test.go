package redact

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBody(t *testing.T) {
	const secret = "canary-7f3a9c2e"
	tests := []struct {
		name, in string
		gone     []string // must not appear in the output
		keep     []string // must still appear
	}{
		{
			name: "openai echo of the full key",
			in:   `{"error":{"message":"Incorrect API key provided: sk-proj-abcdefghijklmnop1234. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}`,
			gone: []string{"sk-proj-abcdefghijklmnop1234"},
			keep: []string{"invalid_api_key", "Incorrect API key provided", "https://platform.openai.com"},
		},
		{
			name: "a configured secret of any shape",
			in:   `{"type":"error","error":{"type":"authentication_error","message":"key ` + secret + ` is not valid"}}`,
			gone: []string{secret},
			keep: []string{"authentication_error", "is not valid"},
		},
		{
			name: "bearer token",
			in:   `{"error":{"message":"header was Bearer abc.def-ghi"}}`,
			gone: []string{"abc.def-ghi"},
		},
		{
			name: "google key",
			in:   `[{"error":{"code":400,"message":"API key not valid: AIzaSyA1234567890abcdefghijklmnopqr","status":"INVALID_ARGUMENT"}}]`,
			gone: []string{"AIzaSyA1234567890abcdefghijklmnopqr"},
			keep: []string{"INVALID_ARGUMENT"},
		},
		{
			name: "key in an object key and a nested string",
			in:   `{"detail":{"` + secret + `":["bad ` + secret + `"]}}`,
			gone: []string{secret},
		},
		{
			name: "not JSON",
			in:   "upstream said: invalid key " + secret + " (Bearer xyz123)",
			gone: []string{secret, "xyz123"},
		},
		{
			name: "secret percent-encoded in a quoted URL",
			in:   `{"error":{"message":"GET https://upstream.example/v1/models?key=ab%2Bc%2Fd%3D%3Dkey9 failed; path /k/ab+c%2Fd==key9; lower ab%2bc%2fd%3d%3dkey9"}}`,
			gone: []string{"ab%2Bc%2Fd%3D%3Dkey9", "ab+c%2Fd==key9", "ab%2bc%2fd%3d%3dkey9"},
			keep: []string{"https://upstream.example/v1/models?key=", "failed"},
		},
		{
			name: "secret with a quote",
			in:   `{"m":"key se\"cret-value"}`,
			gone: []string{`se\"cret-value`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := string(Body([]byte(tt.in), secret, `se"cret-value`, "ab+c/d==key9"))
			for _, g := range tt.gone {
				if strings.Contains(out, g) {
					t.Errorf("%q still in %s", g, out)
				}
			}
			for _, k := range tt.keep {
				if !strings.Contains(out, k) {
					t.Errorf("%q lost from %s", k, out)
				}
			}
			if json.Valid([]byte(tt.in)) && !json.Valid([]byte(out)) {
				t.Errorf("masking broke the JSON: %s", out)
			}
		})
	}
}

func TestBodyUnchanged(t *testing.T) {
	in := []byte(`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
	if out := Body(in, "canary-secret"); &out[0] != &in[0] {
		t.Error("an unchanged body was copied")
	}
}

func TestString(t *testing.T) {
	if got := String("Incorrect API key provided: sk-abc1234567890xyz"); strings.Contains(got, "sk-abc") {
		t.Errorf("String: %s", got)
	}
	if got := String("model gpt-4o-mini is overloaded"); got != "model gpt-4o-mini is overloaded" {
		t.Errorf("String changed plain text: %s", got)
	}
}

// TestStringShapes: credentials that providers echo in messages never
// reach records or events.
func TestStringShapes(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "Incorrect API key provided", "Incorrect API key provided"},
		{"openai key", "Incorrect API key provided: sk-proj-abcdefgh12345678. You can find", "Incorrect API key provided: [redacted] You can find"},
		{"masked openai key", "key sk-abc12***********************xyz9 rejected", "key [redacted] rejected"},
		{"gemini key", "API key AIzaSyA1234567890abcdefghijklmnop not valid", "API key [redacted] not valid"},
		{"bearer", "header Bearer abc.def.ghi was refused", "header [redacted] was refused"},
		{"long token", "token 0123456789abcdef0123456789abcdef01 expired", "token [redacted] expired"},
		{"model names stay", "model gpt-4.1-mini-2025-04-14 not found", "model gpt-4.1-mini-2025-04-14 not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := String(tt.in); got != tt.want {
				t.Fatalf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	if strings.Contains(String("sk-live-0123456789"), "0123456789") {
		t.Fatal("key material kept")
	}
}

// Identifiers, resource paths, ids and model names are not secrets;
// tokens, hashes, JWTs and base64 key material are.
func TestStringKeepsIdentifiers(t *testing.T) {
	for _, keep := range []string{
		"provider code unsupported_country_region_territory",
		"Permission denied on resource projects/my-project-123456/locations/us-central1/publishers/google/models/gemini-1.5-pro-002",
		"request 123e4567-e89b-12d3-a456-426614174000 failed",
		"model gpt-4.1-mini-2025-04-14 is not available; try claude-3-5-haiku-20241022",
		"ThisIsAVeryLongCamelCaseIdentifierNameWithoutDigits",
		"GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
	} {
		if got := String(keep); got != keep {
			t.Errorf("String(%q) = %q", keep, got)
		}
	}
	for _, gone := range []string{
		"token 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 expired",
		"jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0 rejected",
		"azure key 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d is invalid",
		"base64 c2VjcmV0LWtleS1tYXRlcmlhbC0xMjM0NTY3ODkwYWJjZGVm=",
	} {
		if got := String(gone); !strings.Contains(got, Mask) {
			t.Errorf("String(%q) kept it", gone)
		}
	}
}

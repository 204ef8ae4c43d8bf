package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		stdin   string
		stdout  string
		wantErr bool
	}{
		{
			name:  "quota trap and transport error",
			args:  []string{"classify"},
			stdin: `{"provider":"openai","status":429,"headers":{"retry-after":"20"},"body":{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}}` + "\n" + `{"provider":"openai","status":null,"error":"dial tcp: connect: connection refused"}` + "\n",
			stdout: `{"class":"quota_exhausted","scope":"key","retry_after_ms":20000,"code":"insufficient_quota","reason":"provider code insufficient_quota","action":"rotate","holds":true,"soft":false}` + "\n" +
				`{"class":"transient","scope":"none","retry_after_ms":null,"code":"connection_refused","reason":"transport: connection refused","action":"retry_same","holds":false,"soft":true}` + "\n",
		},
		{
			name:   "string body, stream event, blank lines skipped",
			args:   []string{"classify"},
			stdin:  "\n" + `{"provider":"anthropic","body":"{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}","stream":true}` + "\n\n",
			stdout: `{"class":"transient","scope":"none","retry_after_ms":null,"code":"overloaded_error","reason":"provider code overloaded_error","action":"retry_same","holds":false,"soft":true}` + "\n",
		},
		{
			name:   "HTTP-date wait against -now",
			args:   []string{"classify", "-now", "2025-06-02T12:00:00Z"},
			stdin:  `{"provider":"vllm","status":503,"headers":{"Retry-After":"Mon, 02 Jun 2025 12:00:30 GMT"},"body":"upstream connect error"}`,
			stdout: `{"class":"transient","scope":"none","retry_after_ms":30000,"code":"503","reason":"message: transient","action":"retry_same","holds":false,"soft":true}` + "\n",
		},
		{
			name:  "malformed line reported, rest classified, exit 1",
			args:  []string{"classify"},
			stdin: `{"provider":"gemini","status":400,"body":{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT","details":[{"reason":"API_KEY_INVALID"}]}}}` + "\n" + `{not json` + "\n" + `{"status":"x"}` + "\n" + `{"provider":"openai","status":401}` + "\n",
			stdout: `{"class":"credential_rejected","scope":"key","retry_after_ms":null,"code":"API_KEY_INVALID","reason":"provider code API_KEY_INVALID","action":"rotate","holds":true,"soft":false}` + "\n" +
				`{"error":"line 2: decode input: invalid character 'n' looking for beginning of object key string"}` + "\n" +
				`{"error":"line 3: decode input: json: cannot unmarshal string into Go struct field WireInput.status of type int"}` + "\n" +
				`{"class":"credential_rejected","scope":"key","retry_after_ms":null,"code":"401","reason":"status 401","action":"rotate","holds":true,"soft":false}` + "\n",
			wantErr: true,
		},
		{
			name: "strict: unknown field, key twice or in two spellings, trailing data; the rest classified",
			args: []string{"classify"},
			stdin: `{"statuz":429,"body":"x"}` + "\n" + `{"status":429,"status":200}` + "\n" + `{"status":429,"Status":401}` + "\n" +
				`{"status":401,"body":{"error":{"code":"a","code":"b"}}}` + "\n" + `{"status":401}]` + "\n" + `{"provider":"openai","status":401}` + "\n",
			stdout: `{"error":"line 1: decode input: json: unknown field \"statuz\""}` + "\n" +
				`{"error":"line 2: decode input: the field \"status\" is named more than once (or in two spellings)"}` + "\n" +
				`{"error":"line 3: decode input: the field \"Status\" is named more than once (or in two spellings)"}` + "\n" +
				`{"error":"line 4: decode input: the key \"code\" is named twice in one object"}` + "\n" +
				`{"error":"line 5: decode input: trailing data after the object"}` + "\n" +
				`{"class":"credential_rejected","scope":"key","retry_after_ms":null,"code":"401","reason":"status 401","action":"rotate","holds":true,"soft":false}` + "\n",
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), tt.args, strings.NewReader(tt.stdin), &out, &errOut)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v (stderr %q)", err, tt.wantErr, errOut.String())
			}
			if out.String() != tt.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), tt.stdout)
			}
		})
	}
}

func TestClassifyTripFromEnv(t *testing.T) {
	t.Setenv("SWITCHYARD_TRIP_ODD_MATCH", "weird upstream")
	t.Setenv("SWITCHYARD_TRIP_ODD_CLASS", "quota_exhausted")
	t.Setenv("SWITCHYARD_TRIP_ODD_TTL", "1h")
	var out bytes.Buffer
	err := run(context.Background(), []string{"classify", "-trip-from-env"}, strings.NewReader(`{"provider":"openai","status":400,"body":{"error":{"message":"weird upstream thing"}}}`), &out, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"class":"quota_exhausted","scope":"key","retry_after_ms":null,"code":"400","reason":"trip_on rule odd (built-in: status 400)","rule":"odd","hold_ttl_ms":3600000,"action":"rotate","holds":true,"soft":false}` + "\n"
	if out.String() != want {
		t.Errorf("got  %swant %s", out.String(), want)
	}
}

func TestRunUsage(t *testing.T) {
	var errOut bytes.Buffer
	if err := run(context.Background(), nil, nil, &bytes.Buffer{}, &errOut); err == nil || !strings.Contains(errOut.String(), "classify") {
		t.Errorf("no command: err %v, usage %q", err, errOut.String())
	}
	if err := run(context.Background(), []string{"bogus"}, nil, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || errors.Is(err, errSilent) {
		t.Errorf("unknown command: err %v", err)
	}
	if err := run(context.Background(), []string{"classify", "extra"}, strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Error("stray argument accepted")
	}
}

// TestVerbHelp: swctl VERB -h (and a sub-verb's -h) prints that verb's
// usage and exits 0, for every verb.
func TestVerbHelp(t *testing.T) {
	args := [][]string{
		{"holds", "ls"}, {"holds", "release"}, {"providers", "status"}, {"events", "tail"},
		{"budget", "reset"}, {"route", "explain"}, {"debug", "list"}, {"config", "show"}, {"config", "step"},
	}
	for _, c := range commands() {
		args = append(args, []string{c.name})
	}
	for _, a := range args {
		for _, h := range []string{"-h", "--help"} {
			name := strings.Join(append(a, h), " ")
			t.Run(name, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				err := run(context.Background(), append(append([]string{}, a...), h), strings.NewReader(""), &stdout, &stderr)
				if err != nil {
					t.Fatalf("swctl %s: %v\n%s", name, err, stderr.String())
				}
				if !strings.Contains(stderr.String(), "usage: swctl "+a[0]) {
					t.Errorf("swctl %s printed %q, want its usage", name, stderr.String())
				}
			})
		}
	}
}

// TestVersion: swctl version and swctl -version print the build's
// version and commit.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "-version", "--version"} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), []string{arg}, nil, &stdout, &stderr); err != nil {
			t.Fatalf("swctl %s: %v", arg, err)
		}
		if out := stdout.String(); !strings.HasPrefix(out, "swctl ") || !strings.Contains(out, "(commit ") {
			t.Errorf("swctl %s printed %q", arg, out)
		}
	}
}

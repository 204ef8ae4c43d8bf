package main

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"
)

func TestPrintEvent(t *testing.T) {
	tests := []struct {
		name, kind, data string
		want             []string // fields of the printed line after the time
	}{
		{"health names its provider, key and the move", "health",
			`{"v":1,"kind":"health","provider":"openai","key":"primary","status":"unhealthy","previous":"healthy","reason":"3 checks failed","code":"invalid_api_key","class":"credential_rejected","at":"2026-12-01T10:00:00Z"}`,
			[]string{"health", "openai/primary", "credential_rejected", "healthy → unhealthy", "3 checks failed (invalid_api_key)"}},
		{"health of a whole provider, first record", "health",
			`{"v":1,"kind":"health","provider":"anthropic","status":"healthy","previous":"","at":"2026-12-01T10:00:00Z"}`,
			[]string{"health", "anthropic", "-", "healthy"}},
		{"hold names its scope", "hold",
			`{"scope":{"provider":"openai","key":"primary","model":"gpt-4o"},"class":"rate_limit","reason":"429","at":"2026-12-01T10:00:00Z"}`,
			[]string{"hold", "openai/primary/gpt-4o", "rate_limit", "-", "429"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tw := tabwriter.NewWriter(&out, 0, 4, 2, ' ', 0)
			if err := printEvent(tw, &out, false, tc.kind, tc.data); err != nil {
				t.Fatal(err)
			}
			line := strings.TrimSpace(out.String())
			cols := strings.Split(line, "  ")
			var got []string
			for _, c := range cols[1:] { // the time is local
				if c = strings.TrimSpace(c); c != "" {
					got = append(got, c)
				}
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("printed %q\nwant fields %q", line, tc.want)
			}
		})
	}
}

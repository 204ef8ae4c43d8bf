package main

import "testing"

func TestHealthText(t *testing.T) {
	tests := []struct{ name, circuit, health, want string }{
		{"closed: the check", "closed", "healthy", "healthy"},
		{"open wins over a healthy check", "open", "healthy", "healthy (the open circuit wins)"},
		{"half-open", "half-open", "degraded", "degraded (trial requests decide)"},
		{"no breaker", "disabled", "unknown", "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := healthText(tc.circuit, tc.health); got != tc.want {
				t.Fatalf("healthText(%q, %q) = %q, want %q", tc.circuit, tc.health, got, tc.want)
			}
		})
	}
}

package proxy

import (
	"net/http"
	"testing"

	"switchyard.dev/shared/config"
)

// TestPlanModels: a key of a plan that lists models may use what both its
// own list and the plan's allow.
func TestPlanModels(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Plans = map[string]config.Plan{"openai-only": {Models: []string{"fake-openai/*", "demo-claude"}}}
		c.Clients[0].Models = []string{"*"}
		c.Clients[0].Plan = "openai-only"
	})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tt := range []struct {
		model string
		want  int
	}{
		{"demo-model", http.StatusOK},             // on fake-openai only
		{"fake-openai/demo-model", http.StatusOK}, // provider/model
		{"demo-claude", http.StatusOK},            // named by the plan
		{"fake-anthropic/demo-claude", http.StatusForbidden},
		{"demo-chat", http.StatusForbidden}, // a chain with a step elsewhere
	} {
		status, _, body := f.call(t, "/v1/chat/completions", `{"model":"`+tt.model+`",`+msgs+`}`)
		if status != tt.want {
			t.Errorf("%s: %d, want %d: %s", tt.model, status, tt.want, body)
		}
	}
}

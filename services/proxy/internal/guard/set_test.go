package guard

import (
	"testing"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/guardrail"
)

// TestBuiltinsAgree: every built-in the configuration accepts is one the
// engine compiles.
func TestBuiltinsAgree(t *testing.T) {
	for _, b := range config.GuardrailBuiltins {
		if _, err := guardrail.Compile([]guardrail.Def{{Name: "g", Builtins: []string{b}}}); err != nil {
			t.Errorf("built-in %q: %v", b, err)
		}
	}
	if _, err := guardrail.Compile([]guardrail.Def{{Name: "g", Builtins: []string{"nope"}}}); err == nil {
		t.Error("an unknown built-in compiles")
	}
}

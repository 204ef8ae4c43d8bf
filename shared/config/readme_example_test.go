package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fleet configuration the root README shows loads as shown, with its
// password variable set (a secret variable named SWITCHYARD_... would be
// taken for an override of a key and rejected).
func TestReadmeFleetExampleLoads(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "Configure every service of the fleet the same way:")
	if !ok {
		t.Fatal("README has no fleet configuration example")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("unterminated yaml block")
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "   ")) // the list item's indentation
	}
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, []string{"NATS_SWITCHYARD_PASSWORD=hunter2"})
	if err != nil {
		t.Fatalf("the README's fleet example does not load: %v", err)
	}
	if cfg.NATS.Replicas != 3 || cfg.NATS.PasswordValue.Reveal() != "hunter2" || !strings.Contains(cfg.NATS.URL, "nats-3.internal") {
		t.Errorf("loaded %+v", cfg.NATS)
	}
}

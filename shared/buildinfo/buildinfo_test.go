package buildinfo

import (
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	// go test records no VCS settings: the module's version, commit unknown
	if got := Version(); !strings.HasSuffix(got, "(commit unknown)") {
		t.Errorf("Version() under go test = %q", got)
	}
	version, commit = "v1.2.3", "abc123"
	defer func() { version, commit = "", "" }()
	if got := Version(); got != "v1.2.3 (commit abc123)" {
		t.Errorf("Version() with -ldflags values = %q", got)
	}
}

package translate

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fixedTime is the clock of every test, so that "created" is stable.
var fixedTime = time.Unix(1750000000, 0)

func TestMain(m *testing.M) {
	now = func() time.Time { return fixedTime }
	newIDSuffix = func() string { return "GENERATED0000000000000000" }
	os.Exit(m.Run())
}

// golden compares got with the golden file path, or rewrites it under
// -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run with -update if the change is intended)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// indentJSON returns b indented, failing the test when b is not JSON.
func indentJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, b)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// inputs lists the input files of a testdata directory: name -> path.
func inputs(t *testing.T, dir, ext string) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", dir, "*"+ext))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no %s inputs in testdata/%s", ext, dir)
	}
	m := make(map[string]string, len(paths))
	for _, p := range paths {
		if strings.Contains(filepath.Base(p), ".golden") {
			continue
		}
		m[strings.TrimSuffix(filepath.Base(p), ext)] = p
	}
	return m
}

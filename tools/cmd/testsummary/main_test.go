package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The helper-process modes: the test binary plays `go test -json`.
const helperEnv = "TESTSUMMARY_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "pass":
		fmt.Print(passing)
		os.Exit(0)
	case "fail":
		fmt.Print(mixed)
		os.Exit(1)
	case "pass-exit-3": // every test passed, the command failed anyway
		fmt.Print(passing)
		fmt.Fprintln(os.Stderr, "go: something went wrong")
		os.Exit(3)
	}
	os.Exit(99)
}

// passing: one package passes (with a skipped test and a subtest), one
// has no test files.
const passing = `{"Action":"start","Package":"x/ok"}
{"Action":"run","Package":"x/ok","Test":"TestOK"}
{"Action":"output","Package":"x/ok","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"x/ok","Test":"TestOK","Output":"    ok_test.go:3: chatter\n"}
{"Action":"output","Package":"x/ok","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"x/ok","Test":"TestOK"}
{"Action":"run","Package":"x/ok","Test":"TestTool"}
{"Action":"output","Package":"x/ok","Test":"TestTool","Output":"=== RUN   TestTool\n"}
{"Action":"output","Package":"x/ok","Test":"TestTool","Output":"    tool_test.go:9: frob not found on PATH; install it with\n"}
{"Action":"output","Package":"x/ok","Test":"TestTool","Output":"        apt-get install frob\n"}
{"Action":"output","Package":"x/ok","Test":"TestTool","Output":"--- SKIP: TestTool (0.00s)\n"}
{"Action":"skip","Package":"x/ok","Test":"TestTool"}
{"Action":"run","Package":"x/ok","Test":"TestTable"}
{"Action":"run","Package":"x/ok","Test":"TestTable/case_1"}
{"Action":"output","Package":"x/ok","Test":"TestTable/case_1","Output":"=== RUN   TestTable/case_1\n"}
{"Action":"output","Package":"x/ok","Test":"TestTable/case_1","Output":"    --- SKIP: TestTable/case_1 (0.00s)\n"}
{"Action":"skip","Package":"x/ok","Test":"TestTable/case_1"}
{"Action":"output","Package":"x/ok","Test":"TestTable","Output":"--- PASS: TestTable (0.00s)\n"}
{"Action":"pass","Package":"x/ok","Test":"TestTable"}
{"Action":"output","Package":"x/ok","Output":"PASS\n"}
{"Action":"output","Package":"x/ok","Output":"ok  \tx/ok\t0.012s\n"}
{"Action":"pass","Package":"x/ok"}
{"Action":"start","Package":"x/none"}
{"Action":"output","Package":"x/none","Output":"?   \tx/none\t[no test files]\n"}
{"Action":"skip","Package":"x/none"}
`

// mixed adds a build failure, a failed subtest and a crash.
const mixed = passing + `{"ImportPath":"x/broken [x/broken.test]","Action":"build-output","Output":"# x/broken [x/broken.test]\n"}
{"ImportPath":"x/broken [x/broken.test]","Action":"build-output","Output":"broken_test.go:3:30: declared and not used: x\n"}
{"ImportPath":"x/broken [x/broken.test]","Action":"build-fail"}
{"Action":"start","Package":"x/broken"}
{"Action":"output","Package":"x/broken","Output":"FAIL\tx/broken [build failed]\n"}
{"Action":"fail","Package":"x/broken","FailedBuild":"x/broken [x/broken.test]"}
{"Action":"start","Package":"x/bad"}
{"Action":"run","Package":"x/bad","Test":"TestFine"}
{"Action":"output","Package":"x/bad","Test":"TestFine","Output":"=== RUN   TestFine\n"}
{"Action":"output","Package":"x/bad","Test":"TestFine","Output":"    fine_test.go:1: fine chatter\n"}
{"Action":"output","Package":"x/bad","Test":"TestFine","Output":"--- PASS: TestFine (0.00s)\n"}
{"Action":"pass","Package":"x/bad","Test":"TestFine"}
{"Action":"run","Package":"x/bad","Test":"TestParent"}
{"Action":"output","Package":"x/bad","Test":"TestParent","Output":"=== RUN   TestParent\n"}
{"Action":"run","Package":"x/bad","Test":"TestParent/sub"}
{"Action":"output","Package":"x/bad","Test":"TestParent/sub","Output":"=== RUN   TestParent/sub\n"}
{"Action":"output","Package":"x/bad","Test":"TestParent/sub","Output":"    bad_test.go:5: boom\n"}
{"Action":"output","Package":"x/bad","Test":"TestParent/sub","Output":"--- FAIL: TestParent/sub (0.00s)\n"}
{"Action":"fail","Package":"x/bad","Test":"TestParent/sub"}
{"Action":"output","Package":"x/bad","Test":"TestParent","Output":"--- FAIL: TestParent (0.00s)\n"}
{"Action":"fail","Package":"x/bad","Test":"TestParent"}
{"Action":"output","Package":"x/bad","Output":"FAIL\n"}
{"Action":"output","Package":"x/bad","Output":"FAIL\tx/bad\t0.010s\n"}
{"Action":"fail","Package":"x/bad"}
{"Action":"start","Package":"x/crash"}
{"Action":"run","Package":"x/crash","Test":"TestCrash"}
{"Action":"output","Package":"x/crash","Test":"TestCrash","Output":"=== RUN   TestCrash\n"}
{"Action":"output","Package":"x/crash","Test":"TestCrash","Output":"panic: kaboom\n"}
{"Action":"output","Package":"x/crash","Output":"FAIL\tx/crash\t0.020s\n"}
{"Action":"fail","Package":"x/crash"}
`

func summarise(t *testing.T, input string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(nil, strings.NewReader(input), &out, &errb)
	if errb.Len() > 0 {
		t.Errorf("stderr: %s", errb.String())
	}
	return out.String(), code
}

func contains(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func lacks(t *testing.T, out string, nots ...string) {
	t.Helper()
	for _, n := range nots {
		if strings.Contains(out, n) {
			t.Errorf("output has %q:\n%s", n, out)
		}
	}
}

func TestPassingRunListsSkips(t *testing.T) {
	out, code := summarise(t, passing)
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	want := "ok  \tx/ok\t0.012s\n" +
		"?   \tx/none\t[no test files]\n" +
		"\n" +
		"skipped tests (2):\n" +
		"  x/ok  TestTool\n" +
		"      tool_test.go:9: frob not found on PATH; install it with\n" +
		"      apt-get install frob\n" +
		"  x/ok  TestTable/case_1\n" +
		"      (no reason given)\n" +
		"tests: 2 passed, 0 failed, 2 skipped; packages: 1 ok, 0 failed\n" +
		"PASS\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestFailures(t *testing.T) {
	out, code := summarise(t, mixed)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	contains(t, out,
		// build errors, as go test prints them
		"# x/broken [x/broken.test]\nbroken_test.go:3:30: declared and not used: x\n",
		"FAIL\tx/broken [build failed]\n",
		// the failed subtest's output, then its parent's FAIL line, then the package's
		"    bad_test.go:5: boom\n--- FAIL: TestParent/sub (0.00s)\n--- FAIL: TestParent (0.00s)\nFAIL\nFAIL\tx/bad\t0.010s\n",
		// a crash: the running test's output
		"panic: kaboom\nFAIL\tx/crash\t0.020s\n",
		"ok  \tx/ok\t0.012s\n",
		"skipped tests (2):\n  x/ok  TestTool\n",
		"failed (4):\n  x/broken  (package: see its output above)\n  x/bad  TestParent/sub\n  x/bad  TestParent\n  x/crash  TestCrash (did not finish)\n",
		"tests: 3 passed, 3 failed, 2 skipped; packages: 1 ok, 3 failed; build failures: 1\nFAIL\n",
	)
	// passing tests' output and -v markers stay out
	lacks(t, out, "chatter", "=== RUN", "--- PASS", "fine chatter")
}

func TestCutStream(t *testing.T) {
	// The stream ends inside a package (go test killed): it counts as failed.
	cut := `{"Action":"start","Package":"x/cut"}
{"Action":"run","Package":"x/cut","Test":"TestLong"}
{"Action":"output","Package":"x/cut","Test":"TestLong","Output":"=== RUN   TestLong\n"}
{"Action":"output","Package":"x/cut","Test":"TestLong","Output":"    long_test.go:2: halfway\n"}
`
	out, code := summarise(t, cut)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	contains(t, out, "    long_test.go:2: halfway\n", "  x/cut  TestLong (did not finish)\n")
}

func TestNotJSON(t *testing.T) {
	out, code := summarise(t, "--- FAIL: TestX (0.00s)\nFAIL\tx\t0.1s\n")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	contains(t, out, "--- FAIL: TestX (0.00s)\n", "FAIL: the input is not go test -json output\n")

	out, code = summarise(t, "")
	if code != 1 {
		t.Errorf("empty input: exit %d, want 1", code)
	}
	contains(t, out, "FAIL: no go test -json events read\n")
}

// TestCommand runs the command itself (this test binary playing go test)
// and exits with the right status.
func TestCommand(t *testing.T) {
	for _, tt := range []struct {
		mode     string
		code     int
		want     string
		wantErrs string
	}{
		{"pass", 0, "PASS\n", ""},
		{"fail", 1, "tests: 3 passed, 3 failed, 2 skipped", ""},
		{"pass-exit-3", 3, "FAIL: the command exited with status 3", "go: something went wrong\n"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Setenv(helperEnv, tt.mode)
			var out, errb bytes.Buffer
			code := run([]string{os.Args[0], "-test.run=^$"}, strings.NewReader(""), &out, &errb)
			if code != tt.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tt.code, out.String(), errb.String())
			}
			contains(t, out.String(), tt.want, "skipped tests (2):\n  x/ok  TestTool\n")
			if errb.String() != tt.wantErrs {
				t.Errorf("stderr %q, want %q", errb.String(), tt.wantErrs)
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run([]string{"/nonexistent/go"}, strings.NewReader(""), &out, &errb); code != 2 || !strings.Contains(errb.String(), "/nonexistent/go") {
		t.Errorf("missing command: exit %d, stderr %q", code, errb.String())
	}
}

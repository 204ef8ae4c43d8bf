// Command testsummary runs `go test -json` (or reads its output on stdin)
// and prints what a plain `go test` would: one ok/FAIL line per package,
// the output of failing tests, build errors. At the end it lists every
// skipped test with its package and reason, so that a run cannot pass
// quietly by skipping, and the totals.
//
//	testsummary -- go test -race -count=1 -json ./shared/...
//	go test -json ./... | testsummary
//
// It exits 1 when a test, a package or a build failed (or nothing was
// read), with the command's own status when the command failed otherwise
// (a bad flag, say), and 0 when everything passed.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"

	"switchyard.dev/shared/buildinfo"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: testsummary [-- go test -json ...]\n\n"+
			"Runs the command (or reads go test -json output on stdin), prints per-package\n"+
			"results and failing tests' output, then the skipped tests and the totals.\n")
		flag.PrintDefaults()
	}
	version := flag.Bool("version", false, "print the build's version and commit and exit")
	flag.Parse()
	if *version {
		fmt.Println("testsummary", buildinfo.Version())
		return
	}
	os.Exit(run(flag.Args(), os.Stdin, os.Stdout, os.Stderr))
}

// run summarises the output of the command args, or of stdin when args
// is empty, and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	s := newSummary(stdout)
	if len(args) == 0 {
		if err := s.read(stdin); err != nil {
			fmt.Fprintf(stderr, "testsummary: reading stdin: %v\n", err)
			return 2
		}
		return s.finish(0)
	}

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = stdin
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "testsummary: %v\n", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testsummary: %v\n", err)
		return 2
	}
	// An interrupt reaches the command too (same process group): keep
	// reading until it ends, so that what ran is still summarised.
	signal.Ignore(os.Interrupt)
	readErr := s.read(out)
	if readErr != nil {
		_, _ = io.Copy(io.Discard, out)
	}
	waitErr := cmd.Wait()
	if readErr != nil {
		fmt.Fprintf(stderr, "testsummary: reading %s: %v\n", args[0], readErr)
	}
	code := 0
	var exit *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exit) && exit.ExitCode() > 0:
		code = exit.ExitCode()
	default:
		fmt.Fprintf(stderr, "testsummary: %s: %v\n", args[0], waitErr)
		code = 2
	}
	return s.finish(code)
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string // build-output, build-fail
	FailedBuild string
}

type testRun struct {
	name   string
	output []string
	failed bool
	done   bool
}

type pkgRun struct {
	output []string // package-level lines (no test)
	tests  map[string]*testRun
	order  []*testRun // in the order they started
	failed []*testRun // in the order they failed: subtests before their parent
}

// skipped is one skipped test: where, which, why.
type skipped struct {
	pkg, test string
	reason    []string
}

// failed names one failed test, or a package that failed outside its
// tests (test "").
type failed struct {
	pkg, test string
}

type summary struct {
	w        io.Writer
	pkgs     map[string]*pkgRun
	skips    []skipped
	failures []failed
	builds   int // builds that failed
	passed   int
	okPkgs   int
	badPkgs  int
	events   int
	other    int // lines that were not test2json events
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, pkgs: map[string]*pkgRun{}}
}

// read consumes a test2json stream, printing as packages finish.
func (s *summary) read(r io.Reader) error {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			s.line(line)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (s *summary) line(line string) {
	var ev event
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &ev) != nil || ev.Action == "" {
		// Not an event (a program writing to the test binary's stdout
		// outside a test is still wrapped, so this is rare): pass it on.
		s.other++
		fmt.Fprint(s.w, line)
		return
	}
	s.events++
	s.event(ev)
}

func (s *summary) pkg(name string) *pkgRun {
	p := s.pkgs[name]
	if p == nil {
		p = &pkgRun{tests: map[string]*testRun{}}
		s.pkgs[name] = p
	}
	return p
}

func (s *summary) event(ev event) {
	switch ev.Action {
	case "build-output":
		fmt.Fprint(s.w, ev.Output)
		return
	case "build-fail":
		s.builds++
		return
	}
	p := s.pkg(ev.Package)
	if ev.Test == "" {
		switch ev.Action {
		case "output":
			p.output = append(p.output, ev.Output)
		case "pass", "skip": // skip: a package without test files
			for _, l := range p.output {
				if l != "PASS\n" {
					fmt.Fprint(s.w, l)
				}
			}
			if ev.Action == "pass" {
				s.okPkgs++
			}
			delete(s.pkgs, ev.Package)
		case "fail":
			s.packageFailed(ev.Package, p)
			delete(s.pkgs, ev.Package)
		}
		return
	}
	t := p.tests[ev.Test]
	if t == nil {
		t = &testRun{name: ev.Test}
		p.tests[ev.Test] = t
		p.order = append(p.order, t)
	}
	switch ev.Action {
	case "output":
		t.output = append(t.output, ev.Output)
	case "pass":
		s.passed++
		t.done, t.output = true, nil
	case "skip":
		s.skips = append(s.skips, skipped{pkg: ev.Package, test: ev.Test, reason: skipReason(t.output)})
		t.done, t.output = true, nil
	case "fail":
		s.failures = append(s.failures, failed{pkg: ev.Package, test: ev.Test})
		t.done, t.failed = true, true
		p.failed = append(p.failed, t)
	}
}

// packageFailed prints what go test -v prints for a failed package, less
// the passing tests: each failed test's output ending with its --- FAIL
// line, then the output of tests that never finished (a crash, a
// timeout), then the package's own lines (a panic outside a test, leaked
// goroutines, the FAIL line).
func (s *summary) packageFailed(name string, p *pkgRun) {
	s.badPkgs++
	unfinished := 0
	for _, t := range p.order {
		if !t.done {
			s.failures = append(s.failures, failed{pkg: name, test: t.name + " (did not finish)"})
			unfinished++
		}
	}
	if len(p.failed) == 0 && unfinished == 0 {
		s.failures = append(s.failures, failed{pkg: name})
	}
	print := func(t *testRun) {
		for _, l := range t.output {
			if !isMarker(l) {
				fmt.Fprint(s.w, l)
			}
		}
	}
	for _, t := range p.failed {
		print(t)
	}
	for _, t := range p.order {
		if !t.done {
			print(t)
		}
	}
	for _, l := range p.output {
		fmt.Fprint(s.w, l)
	}
}

// isMarker reports the lines -v adds that plain go test does not print.
func isMarker(l string) bool {
	for _, m := range []string{"=== RUN ", "=== PAUSE ", "=== CONT ", "=== NAME "} {
		if strings.HasPrefix(l, m) {
			return true
		}
	}
	return false
}

// skipReason is what the test logged before its --- SKIP line: the
// t.Skip message and any t.Log before it.
func skipReason(output []string) []string {
	var r []string
	for _, l := range output {
		l = strings.TrimSpace(l)
		if l == "" || isMarker(l+" ") || strings.HasPrefix(l, "--- SKIP: ") {
			continue
		}
		r = append(r, l)
	}
	return r
}

// finish prints the skipped and failed tests and the totals, and returns
// the exit status given the command's own.
func (s *summary) finish(cmdCode int) int {
	// Packages that never ended (the stream was cut).
	for name, p := range s.pkgs {
		s.packageFailed(name, p)
	}
	fmt.Fprintln(s.w)
	if len(s.skips) == 0 {
		fmt.Fprintln(s.w, "skipped tests: none")
	} else {
		fmt.Fprintf(s.w, "skipped tests (%d):\n", len(s.skips))
		for _, sk := range s.skips {
			fmt.Fprintf(s.w, "  %s  %s\n", sk.pkg, sk.test)
			if len(sk.reason) == 0 {
				fmt.Fprintln(s.w, "      (no reason given)")
			}
			for _, l := range sk.reason {
				fmt.Fprintf(s.w, "      %s\n", l)
			}
		}
	}
	if len(s.failures) > 0 {
		fmt.Fprintf(s.w, "failed (%d):\n", len(s.failures))
		for _, f := range s.failures {
			if f.test == "" {
				fmt.Fprintf(s.w, "  %s  (package: see its output above)\n", f.pkg)
			} else {
				fmt.Fprintf(s.w, "  %s  %s\n", f.pkg, f.test)
			}
		}
	}
	fmt.Fprintf(s.w, "tests: %d passed, %d failed, %d skipped; packages: %d ok, %d failed",
		s.passed, s.countFailedTests(), len(s.skips), s.okPkgs, s.badPkgs)
	if s.builds > 0 {
		fmt.Fprintf(s.w, "; build failures: %d", s.builds)
	}
	fmt.Fprintln(s.w)

	bad := s.badPkgs > 0 || len(s.failures) > 0 || s.builds > 0
	switch {
	case bad:
		fmt.Fprintln(s.w, "FAIL")
		return 1
	case cmdCode != 0:
		fmt.Fprintf(s.w, "FAIL: the command exited with status %d (see its output above)\n", cmdCode)
		return cmdCode
	case s.events == 0 && s.other > 0:
		fmt.Fprintln(s.w, "FAIL: the input is not go test -json output")
		return 1
	case s.events == 0:
		fmt.Fprintln(s.w, "FAIL: no go test -json events read")
		return 1
	}
	fmt.Fprintln(s.w, "PASS")
	return 0
}

func (s *summary) countFailedTests() int {
	n := 0
	for _, f := range s.failures {
		if f.test != "" {
			n++
		}
	}
	return n
}

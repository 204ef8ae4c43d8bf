package servicetest

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// MetricsAfterConcurrentRequests sends requests of every method to every
// path from several goroutines at once (the server's request buffers are
// reused across them), then scrapes base+"/metrics": it must answer 200
// with every line valid UTF-8, every method label a whole method and every
// route label a path (or a fixed word such as "unmatched"). A label stored from a server string that pointed
// into a reused buffer shows up as a mangled value ("GETETE", "Vlain") or
// as a 500 ("collected before with the same name and label values").
func MetricsAfterConcurrentRequests(t *testing.T, base string, header http.Header, paths []string) {
	t.Helper()
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				m := methods[(g+i)%len(methods)]
				p := paths[(g*7+i)%len(paths)]
				req, err := http.NewRequest(m, base+p, strings.NewReader(`{"x":1}`))
				if err != nil {
					t.Error(err)
					return
				}
				for k, vs := range header {
					req.Header[k] = vs
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	for range 2 {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics after concurrent requests: %d %s", resp.StatusCode, b)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "#") || !strings.Contains(line, "{") {
				continue
			}
			if !utf8.ValidString(line) {
				t.Errorf("a metric line is not UTF-8: %q", line)
			}
			for name, v := range labels(line) {
				switch {
				case name == "method" && !slices.Contains(methods, v) && v != http.MethodHead && v != http.MethodOptions:
					t.Errorf("method label %q in %s", v, line)
				case (name == "route" || name == "path") && !strings.HasPrefix(v, "/") && strings.Trim(v, "abcdefghijklmnopqrstuvwxyz_") != "":
					t.Errorf("%s label %q in %s", name, v, line)
				}
			}
		}
	}
}

// labels returns a sample line's labels by name.
func labels(line string) map[string]string {
	open, end := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
	if open < 0 || end < open {
		return nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(line[open+1:end], `",`) {
		if i := strings.Index(kv, `="`); i >= 0 {
			out[kv[:i]] = strings.TrimSuffix(kv[i+2:], `"`)
		}
	}
	return out
}

package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRun(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "fake.yaml")
	err := os.WriteFile(cfg, []byte(`
name: cfg-name
addr: 127.0.0.1:1
chunks: 7
rules:
  - key: sk-quota
    error: openai.insufficient_quota
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testkit.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-config", cfg, "-listen", "127.0.0.1:0", "-chunks", "3", "-name", "flag-name"},
			&out, slog.New(slog.DiscardHandler))
	}()

	urlRE := regexp.MustCompile(`fakeprovider flag-name listening on (http://\S+)`)
	var url string
	deadline := time.Now().Add(5 * time.Second)
	for url == "" {
		if m := urlRE.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run ended early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no URL printed: %q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	post := func(key string) (int, string) {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := post("sk-ok"); status != 200 || !strings.Contains(body, `"content":"chunk 0 chunk 1 chunk 2"`) {
		t.Errorf("chunks flag not applied: %d %s", status, body)
	}
	if status, _ := post("sk-quota"); status != 429 {
		t.Errorf("config rule not applied: status %d", status)
	}
	tr.CloseIdleConnections()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop")
	}
}

func TestRunBadConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(cfg, []byte("rules:\n  - error: nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"-config", cfg}, io.Discard, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "rules[0].error") {
		t.Errorf("run = %v, want an error naming rules[0].error", err)
	}
}

func TestRunVersion(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), []string{"-version"}, &out, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "fakeprovider ") || !strings.Contains(out.String(), "(commit ") {
		t.Errorf("-version printed %q", out.String())
	}
}

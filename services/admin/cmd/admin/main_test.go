package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"go.uber.org/goleak"

	"switchyard.dev/shared/launch"
	"switchyard.dev/shared/natsembed"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

func TestRunServesUntilCancelled(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer natsembed.Stop(ns)

	listen := testkit.FreeAddr(t)
	path := filepath.Join(t.TempDir(), "gw.yaml")
	yaml := "log:\n  format: json\nnats:\n  url: " + ns.ClientURL() + "\nadmin:\n  listen: " + listen + "\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var logs testkit.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- launch.Run(ctx, spec, []string{"-config", path}, nil, &logs) }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("admin never ready: %v\n%s", err, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if !strings.Contains(logs.String(), `"service":"admin"`) {
		t.Errorf("log lines lack service=admin:\n%s", logs.String())
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/shared/usage"
	"switchyard.dev/shared/usage/rollup"
)

// TestRecorderKilledMidBatch: two admin processes on one NATS server share
// the usage recorder by its lease; records are published as proxies
// publish them, about 200 a second; the recorder is killed with SIGKILL
// in the middle of its batches and the other admin takes the lease over
// and replays from the checkpoint. Afterwards the rollups hold every
// record exactly once: the report's requests equal the records
// published, all of them rolled up, none twice.
func TestRecorderKilledMidBatch(t *testing.T) {
	bin := buildBinary(t, "switchyard.dev/services/admin/cmd/admin")
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsembed.Stop(ns) })
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`log: {level: info, format: json}
nats: {url: %s}
admin:
  tokens: [{id: ops, secret: env:ADMIN_TOKEN, role: operator}]
metering:
  rollups: {lease: 3s, flush_interval: 100ms}
`, ns.ClientURL())), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "recorder-test-token"
	admins := []*proxyProcess{
		startServiceProcess(t, bin, "admin-a", cfgPath, "SWITCHYARD_ADMIN_LISTEN", "ADMIN_TOKEN="+token),
		startServiceProcess(t, bin, "admin-b", cfgPath, "SWITCHYARD_ADMIN_LISTEN", "ADMIN_TOKEN="+token),
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, a := range admins {
		a.awaitReady(t, client, 20*time.Second)
	}
	recording := func() *proxyProcess {
		for _, a := range admins {
			if strings.Contains(a.out.String(), "recording usage rollups") {
				select {
				case <-a.done:
				default:
					return a
				}
			}
		}
		return nil
	}
	var first *proxyProcess
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if first = recording(); first == nil {
			return fmt.Errorf("no admin records yet")
		}
		return nil
	})

	_, js := testkit.ConnectNATS(t, ns.ClientURL())
	var published atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	pubDone := make(chan error, 1)
	go func() {
		pubDone <- func() error {
			t := time.NewTicker(50 * time.Millisecond) // 10 records a message: 200 a second
			defer t.Stop()
			for n := 0; ; n++ {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
				var buf []byte
				for j := range 10 {
					r := usage.Record{V: usage.SchemaVersion, RequestID: fmt.Sprintf("req-%05d-%d", n, j), At: time.Now().UTC(),
						ClientID: fmt.Sprintf("client-%d", n%4), Provider: "openai", Model: "gpt-4o", Status: 200, LatencyMS: 12}
					if j > 0 {
						buf = append(buf, '\n')
					}
					buf = r.AppendJSON(buf)
				}
				pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := js.Publish(pctx, usage.Subject("openai", fmt.Sprintf("client-%d", n%4)), buf, jetstream.WithMsgID(fmt.Sprintf("m%d", n)))
				pcancel()
				if err != nil {
					return err
				}
				published.Add(10)
			}
		}()
	}()
	// mid-batch: the recorder flushes every 100 ms while records arrive
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if published.Load() < 300 {
			return fmt.Errorf("%d published", published.Load())
		}
		return nil
	})
	first.kill()
	var second *proxyProcess
	testkit.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if second = recording(); second == nil || second == first {
			return fmt.Errorf("no other admin took the recorder's lease")
		}
		return nil
	})
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if published.Load() < 800 {
			return fmt.Errorf("%d published", published.Load())
		}
		return nil
	})
	cancel()
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	want := published.Load()

	res, err := bus.Setup(context.Background(), js, bus.SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		octx, ocancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ocancel()
		info, err := res.Usage.Info(octx)
		if err != nil {
			return err
		}
		ck, _, err := rollup.NewStore(nil, res.UsageRollups, nil).Checkpoint(octx)
		if err != nil {
			return err
		}
		if ck.Seq != info.State.LastSeq {
			return fmt.Errorf("checkpoint %d, stream at %d", ck.Seq, info.State.LastSeq)
		}
		return nil
	})
	req, _ := http.NewRequest(http.MethodGet, second.url+"/admin/usage?from=-1h", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		RolledUp int64 `json:"rolled_up"`
		Scanned  int64 `json:"scanned"`
		Totals   struct {
			Requests int64 `json:"requests"`
		} `json:"totals"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("usage: %d %v", resp.StatusCode, err)
	}
	if a.Totals.Requests != want || a.RolledUp != want {
		t.Fatalf("after the recorder's kill -9: %d requests in the report (%d rolled up, %d read from the stream), %d published",
			a.Totals.Requests, a.RolledUp, a.Scanned, want)
	}
	t.Logf("%d records published at 200/s, the recorder killed mid-batch after %d: %d in the rollups, each once", want, 300, a.RolledUp)
}

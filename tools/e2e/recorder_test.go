package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
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
	go func() { pubDone <- publishUsageAt200(ctx, js, &published) }()
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

// publishUsageAt200 publishes usage records as proxies publish them (10 a
// message, one JSON record per line, a message id each) at about 200 a
// second until ctx ends, counting them in published once stored. A
// publish that fails (NATS away) is tried again with the same message id,
// so that a record is stored once however often it was sent; a message
// begun is published before ctx's end is looked at again, so that
// published counts exactly what the stream holds.
func publishUsageAt200(ctx context.Context, js jetstream.JetStream, published *atomic.Int64) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		var buf []byte
		client := fmt.Sprintf("client-%d", n%4)
		for j := range 10 {
			r := usage.Record{V: usage.SchemaVersion, RequestID: fmt.Sprintf("req-%05d-%d", n, j), At: time.Now().UTC(),
				ClientID: client, Provider: "openai", Model: "gpt-4o", Status: 200, LatencyMS: 12}
			if j > 0 {
				buf = append(buf, '\n')
			}
			buf = r.AppendJSON(buf)
		}
		giveUp := time.Now().Add(time.Minute)
		for {
			pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := js.Publish(pctx, usage.Subject("openai", client), buf, jetstream.WithMsgID(fmt.Sprintf("m%d", n)))
			pcancel()
			if err == nil {
				break
			}
			if time.Now().After(giveUp) {
				return fmt.Errorf("publish message %d: %w", n, err)
			}
			time.Sleep(100 * time.Millisecond) // NATS away: again, with the same message id
		}
		published.Add(10)
	}
}

// TestRecorderThroughNATSRestart: the admin's recorder folds usage records
// published at about 200 a second while the NATS server (a child process,
// file storage) is killed with SIGKILL and started again on the same port
// and store: afterwards the rollups hold every record stored exactly once.
func TestRecorderThroughNATSRestart(t *testing.T) {
	srv := startNATSProcess(t, buildBinary(t, "github.com/nats-io/nats-server/v2"))
	bin := buildBinary(t, "switchyard.dev/services/admin/cmd/admin")
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`log: {level: info, format: json}
nats: {url: %s}
admin:
  tokens: [{id: ops, secret: env:ADMIN_TOKEN, role: operator}]
metering:
  rollups: {lease: 3s, flush_interval: 100ms}
`, srv.url())), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "recorder-test-token"
	adm := startServiceProcess(t, bin, "admin", cfgPath, "SWITCHYARD_ADMIN_LISTEN", "ADMIN_TOKEN="+token)
	client := &http.Client{Timeout: 10 * time.Second}
	adm.awaitReady(t, client, 20*time.Second)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(adm.out.String(), "recording usage rollups") {
			return fmt.Errorf("the admin does not record yet")
		}
		return nil
	})

	nc, err := nats.Connect(srv.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	var published atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	pubDone := make(chan error, 1)
	go func() { pubDone <- publishUsageAt200(ctx, js, &published) }()
	atLeast := func(n int64) {
		t.Helper()
		testkit.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
			if published.Load() < n {
				return fmt.Errorf("%d published", published.Load())
			}
			return nil
		})
	}
	atLeast(300)
	srv.kill()
	time.Sleep(time.Second) // the outage: its length is the scenario, not a wait for a condition
	srv.start()
	before := published.Load()
	atLeast(before + 300)
	cancel()
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	want := published.Load()
	res, err := bus.Setup(context.Background(), js, bus.SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
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
		if ck.Seq != info.State.LastSeq || int64(info.State.Msgs)*10 != want {
			return fmt.Errorf("checkpoint %d, stream at %d with %d messages, %d records published", ck.Seq, info.State.LastSeq, info.State.Msgs, want)
		}
		return nil
	})
	req, _ := http.NewRequest(http.MethodGet, adm.url+"/admin/usage?from=-1h", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		RolledUp int64 `json:"rolled_up"`
		Totals   struct {
			Requests int64 `json:"requests"`
		} `json:"totals"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("usage: %d %v", resp.StatusCode, err)
	}
	if a.Totals.Requests != want || a.RolledUp != want {
		t.Fatalf("after NATS's kill -9 and restart: %d requests in the report (%d rolled up), %d published", a.Totals.Requests, a.RolledUp, want)
	}
	t.Logf("%d records published at 200/s across a NATS kill -9: %d in the rollups, each once", want, a.RolledUp)
}

// TestUsageStoreOutageUnderLoad: the admin writes every usage record to
// PostgreSQL (metering.store) while records arrive at about 200 a second;
// PostgreSQL is stopped for 5 s in the middle and started again.
// Afterwards the table holds every record stored exactly once (rows =
// records published, no request id twice) and the rollups hold the same
// count: nothing lost, nothing doubled.
func TestUsageStoreOutageUnderLoad(t *testing.T) {
	pg := testkit.StartPostgres(t)
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsembed.Stop(ns) })
	bin := buildBinary(t, "switchyard.dev/services/admin/cmd/admin")
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`log: {level: info, format: json}
nats: {url: %s}
admin:
  tokens: [{id: ops, secret: env:ADMIN_TOKEN, role: operator}]
metering:
  rollups: {lease: 3s, flush_interval: 100ms}
  store: {url: %q, password: env:PG_PASSWORD}
`, ns.ClientURL(), pg.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "recorder-test-token"
	adm := startServiceProcess(t, bin, "admin", cfgPath, "SWITCHYARD_ADMIN_LISTEN", "ADMIN_TOKEN="+token, "PG_PASSWORD="+pg.Password)
	client := &http.Client{Timeout: 10 * time.Second}
	adm.awaitReady(t, client, 20*time.Second)

	_, js := testkit.ConnectNATS(t, ns.ClientURL())
	var published atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	pubDone := make(chan error, 1)
	go func() { pubDone <- publishUsageAt200(ctx, js, &published) }()
	atLeast := func(n int64) {
		t.Helper()
		testkit.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
			if published.Load() < n {
				return fmt.Errorf("%d published", published.Load())
			}
			return nil
		})
	}
	atLeast(300)
	pg.Stop()
	time.Sleep(5 * time.Second) // the outage: its length is the scenario, not a wait for a condition
	pg.Start()
	before := published.Load()
	atLeast(before + 300)
	cancel()
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	want := published.Load()

	db, err := pgx.Connect(context.Background(), strings.Replace(pg.URL, "postgres://postgres@", "postgres://postgres:"+url.QueryEscape(pg.Password)+"@", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	var rows, distinct int64
	testkit.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if err := db.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT request_id) FROM switchyard_usage_records`).Scan(&rows, &distinct); err != nil {
			return err
		}
		if rows != want {
			return fmt.Errorf("%d rows, %d records published", rows, want)
		}
		return nil
	})
	if distinct != rows {
		t.Fatalf("%d rows but %d request ids: records written twice", rows, distinct)
	}
	req, _ := http.NewRequest(http.MethodGet, adm.url+"/admin/usage?from=-1h", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		Totals struct {
			Requests int64 `json:"requests"`
		} `json:"totals"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("usage: %d %v", resp.StatusCode, err)
	}
	if a.Totals.Requests != rows {
		t.Fatalf("the report says %d requests, PostgreSQL holds %d rows", a.Totals.Requests, rows)
	}
	t.Logf("%d records published at 200/s across a 5 s PostgreSQL outage: %d rows (%d request ids), the report %d", want, rows, distinct, a.Totals.Requests)
}

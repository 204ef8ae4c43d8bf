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

// recorderRig is admin processes recording usage on one NATS server, and
// a publisher of usage records.
type recorderRig struct {
	t       *testing.T
	bin     string // the admin command
	cfgPath string
	env     []string // the admin processes' environment
	client  *http.Client

	js        jetstream.JetStream
	published atomic.Int64
	stopPub   context.CancelFunc
	pubDone   chan error
}

// recorderToken is the operator token of the rig's admin processes.
const recorderToken = "recorder-test-token"

// newRecorderRig writes the admin configuration (NATS at natsURL, a short
// recorder lease, a fast flush, and extra YAML under metering).
func newRecorderRig(t *testing.T, natsURL, metering string, env ...string) *recorderRig {
	t.Helper()
	r := &recorderRig{t: t, bin: buildBinary(t, "switchyard.dev/services/admin/cmd/admin"),
		cfgPath: filepath.Join(t.TempDir(), "gateway.yaml"), env: append([]string{"ADMIN_TOKEN=" + recorderToken}, env...),
		client: &http.Client{Timeout: 10 * time.Second}}
	if err := os.WriteFile(r.cfgPath, []byte(fmt.Sprintf(`log: {level: info, format: json}
nats: {url: %s}
admin:
  tokens: [{id: ops, secret: env:ADMIN_TOKEN, role: operator}]
metering:
  rollups: {lease: 3s, flush_interval: 100ms}
%s`, natsURL, metering)), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// admin starts one admin process and waits until it is ready.
func (r *recorderRig) admin(name string) *proxyProcess {
	r.t.Helper()
	p := startServiceProcess(r.t, r.bin, name, r.cfgPath, "SWITCHYARD_ADMIN_LISTEN", r.env...)
	p.awaitReady(r.t, r.client, 20*time.Second)
	return p
}

// publish starts publishing on js (publishUsageAt200) until stop.
func (r *recorderRig) publish(js jetstream.JetStream) {
	r.js = js
	ctx, cancel := context.WithCancel(context.Background())
	r.stopPub, r.pubDone = cancel, make(chan error, 1)
	go func() { r.pubDone <- publishUsageAt200(ctx, js, &r.published) }()
}

// atLeast waits until n records are published.
func (r *recorderRig) atLeast(n int64) {
	r.t.Helper()
	testkit.CheckFor(r.t, 30*time.Second, 10*time.Millisecond, func() error {
		if got := r.published.Load(); got < n {
			return fmt.Errorf("%d published", got)
		}
		return nil
	})
}

// stop ends the publisher and returns how many records it published.
func (r *recorderRig) stop() int64 {
	r.t.Helper()
	r.stopPub()
	if err := <-r.pubDone; err != nil {
		r.t.Fatal(err)
	}
	return r.published.Load()
}

// waitFolded waits until the recorder's checkpoint is the usage stream's
// last message, and that the stream holds want records.
func (r *recorderRig) waitFolded(want int64) {
	r.t.Helper()
	res, err := bus.Setup(context.Background(), r.js, bus.SetupOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	testkit.CheckFor(r.t, 30*time.Second, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := res.Usage.Info(ctx)
		if err != nil {
			return err
		}
		ck, _, err := rollup.NewStore(nil, res.UsageRollups, nil).Checkpoint(ctx)
		if err != nil {
			return err
		}
		if ck.Seq != info.State.LastSeq || int64(info.State.Msgs)*10 != want {
			return fmt.Errorf("checkpoint %d, stream at %d with %d messages, %d records published", ck.Seq, info.State.LastSeq, info.State.Msgs, want)
		}
		return nil
	})
}

// usageReport is the part of GET /admin/usage the rig's tests read.
type usageReport struct {
	RolledUp int64 `json:"rolled_up"`
	Scanned  int64 `json:"scanned"`
	Totals   struct {
		Requests int64 `json:"requests"`
	} `json:"totals"`
}

// report asks admin for the last hour's usage.
func (r *recorderRig) report(admin *proxyProcess) usageReport {
	r.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, admin.url+"/admin/usage?from=-1h", nil)
	req.Header.Set("Authorization", "Bearer "+recorderToken)
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a usageReport
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
		r.t.Fatalf("usage: %d %v", resp.StatusCode, err)
	}
	return a
}

// TestRecorderKilledMidBatch: two admin processes on one NATS server share
// the usage recorder by its lease; records are published as proxies
// publish them, about 200 a second; the recorder is killed with SIGKILL
// in the middle of its batches and the other admin takes the lease over
// and replays from the checkpoint. Afterwards the rollups hold every
// record exactly once: the report's requests equal the records
// published, all of them rolled up, none twice.
func TestRecorderKilledMidBatch(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsembed.Stop(ns) })
	r := newRecorderRig(t, ns.ClientURL(), "")
	admins := []*proxyProcess{r.admin("admin-a"), r.admin("admin-b")}
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
	r.publish(js)
	r.atLeast(300) // mid-batch: the recorder flushes every 100 ms while records arrive
	first.kill()
	var second *proxyProcess
	testkit.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if second = recording(); second == nil || second == first {
			return fmt.Errorf("no other admin took the recorder's lease")
		}
		return nil
	})
	r.atLeast(800)
	want := r.stop()
	r.waitFolded(want)
	if a := r.report(second); a.Totals.Requests != want || a.RolledUp != want {
		t.Fatalf("after the recorder's kill -9: %d requests in the report (%d rolled up, %d read from the stream), %d published",
			a.Totals.Requests, a.RolledUp, a.Scanned, want)
	}
	t.Logf("%d records published at 200/s, the recorder killed mid-batch after 300: each in the rollups once", want)
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
	r := newRecorderRig(t, srv.url(), "")
	adm := r.admin("admin")
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
	r.publish(js)
	r.atLeast(300)
	srv.kill()
	time.Sleep(time.Second) // the outage: its length is the scenario, not a wait for a condition
	srv.start()
	r.atLeast(r.published.Load() + 300)
	want := r.stop()
	r.waitFolded(want)
	if a := r.report(adm); a.Totals.Requests != want || a.RolledUp != want {
		t.Fatalf("after NATS's kill -9 and restart: %d requests in the report (%d rolled up), %d published", a.Totals.Requests, a.RolledUp, want)
	}
	t.Logf("%d records published at 200/s across a NATS kill -9: each in the rollups once", want)
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
	r := newRecorderRig(t, ns.ClientURL(), fmt.Sprintf("  store: {url: %q, password: env:PG_PASSWORD}\n", pg.URL), "PG_PASSWORD="+pg.Password)
	adm := r.admin("admin")
	_, js := testkit.ConnectNATS(t, ns.ClientURL())
	r.publish(js)
	r.atLeast(300)
	pg.Stop()
	time.Sleep(5 * time.Second) // the outage: its length is the scenario, not a wait for a condition
	pg.Start()
	r.atLeast(r.published.Load() + 300)
	want := r.stop()

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
	r.waitFolded(want)
	if a := r.report(adm); a.Totals.Requests != rows {
		t.Fatalf("the report says %d requests, PostgreSQL holds %d rows", a.Totals.Requests, rows)
	}
	t.Logf("%d records published at 200/s across a 5 s PostgreSQL outage: %d rows (%d request ids)", want, rows, distinct)
}

package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/servicetest"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/shared/usage"
)

// TestUsageBacklogAlerts: with no recorder folding, records that fill the
// usage stream toward metering.max_bytes are reported before the stream
// discards them: switchyard_usage_backlog_bytes grows, a usage_backlog
// event is published and /readyz says degraded with the reason (still
// 200); once a recorder folds them the alert clears (a cleared event,
// /readyz ok).
func TestUsageBacklogAlerts(t *testing.T) {
	e := startEnvWith(t, envOptions{noRecorder: true, backlogEvery: 20 * time.Millisecond,
		edit: func(y string) string { return y + "metering:\n  max_bytes: 1048576\n" }})
	events, err := e.pnc.SubscribeSync(backlogSubject)
	if err != nil {
		t.Fatal(err)
	}
	nextEvent := func(want string) backlogEvent {
		t.Helper()
		m, err := events.NextMsg(testTimeout)
		if err != nil {
			t.Fatalf("no %s event: %v", want, err)
		}
		var ev backlogEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Outcome != want || ev.Kind != "usage" {
			t.Fatalf("event %s, want outcome %s (%v)", m.Data, want, err)
		}
		return ev
	}
	readyz := func() (int, map[string]any) {
		t.Helper()
		a, err := servicetest.Get(e.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		return a.Status, a.Body
	}

	// ~900 KB of records: 90 % of the stream's 1 MiB, none folded
	now := time.Now().UTC()
	pad := strings.Repeat("x", 400)
	for c := range 10 {
		var recs []usage.Record
		for i := range 100 {
			recs = append(recs, rec(fmt.Sprintf("b%d-%d", c, i), now, func(r *usage.Record) {
				r.ClientID = fmt.Sprintf("client-%d", c)
				r.ModelRequested = pad
			}))
		}
		e.publishUsage(recs...)
	}
	ev := nextEvent("backlog")
	if ev.Messages == 0 || ev.MaxBytes != 1<<20 || ev.Share < BacklogAlertShare || ev.Instance == "" {
		t.Errorf("backlog event %+v", ev)
	}
	// said before the stream discarded any
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if info, err := e.proxy.Resources().Usage.Info(ctx); err != nil || info.State.FirstSeq != 1 || info.State.Msgs != 10 {
		t.Fatalf("the stream discarded records: %+v %v", info, err)
	}
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		status, body := readyz()
		if status != 200 || body["status"] != "degraded" || !strings.Contains(fmt.Sprint(body["reason"]), "usage backlog at") {
			return fmt.Errorf("readyz %d %v", status, body)
		}
		return nil
	})
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		return hasMetricAbove(e.base+"/metrics", "switchyard_usage_backlog_bytes", 800_000)
	})

	if err := hasMetricAbove(e.base+"/metrics", "switchyard_usage_recorder_active", -1); err == nil {
		t.Error("an instance that never records exports the recorder's state")
	}
	// a recorder folds them: the alert clears
	e.startRecorder("admin-recorder", context.Background())
	e.waitRecorded()
	nextEvent("cleared")
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		if status, body := readyz(); status != 200 || body["status"] != "ok" {
			return fmt.Errorf("readyz %d %v", status, body)
		}
		return nil
	})
}

// hasMetricAbove reports whether the series name of the Prometheus text
// at url is above min.
func hasMetricAbove(url, name string, min float64) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		var v float64
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			if _, err := fmt.Sscan(rest, &v); err == nil && v > min {
				return nil
			}
			return fmt.Errorf("%s", line)
		}
	}
	return fmt.Errorf("%s not exported", name)
}

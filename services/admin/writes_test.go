package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/servicetest"
	"switchyard.dev/shared/testkit"
)

// readyz polls /readyz until it answers status with the body's fields.
func (e *env) readyz(status int, body map[string]string) {
	e.t.Helper()
	testkit.CheckFor(e.t, testTimeout, 10*time.Millisecond, func() error {
		a, err := servicetest.Get(e.base + "/readyz")
		if err != nil {
			return err
		}
		return a.Want(status, body)
	})
}

// stored reads hold id from switchyard_holds through the test's own
// connection (not through the admin service's table).
func (e *env) stored(id string) (hold.Record, error) {
	js, err := jetstream.New(e.pnc)
	if err != nil {
		return hold.Record{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bus.BucketHolds)
	if err != nil {
		return hold.Record{}, err
	}
	ent, err := kv.Get(ctx, id)
	if err != nil {
		return hold.Record{}, err
	}
	var rec hold.Record
	return rec, json.Unmarshal(ent.Value(), &rec)
}

var (
	readyBody    = map[string]string{"status": "ok", "nats": "connected", "jetstream": "ok"}
	jsDownBody   = map[string]string{"status": "not ready", "nats": "connected", "jetstream": "unavailable"}
	natsDownBody = map[string]string{"status": "not ready", "nats": "disconnected"}
)

// TestWritesQueuedWhileJetStreamDown: NATS stays connected but JetStream
// does not take writes to switchyard_holds (the bucket is gone: to a
// writer, as good as a stream without a leader). /readyz says so; pins and
// a release answer 202 "queued" (never 503: they will land), show in the
// admin's table at once, and are in the bucket once it is back. (The
// bucket itself is checked, not the stand-in proxy's table: a watcher of a
// deleted and re-created bucket is another matter than a leader election.)
func TestWritesQueuedWhileJetStreamDown(t *testing.T) {
	e := startEnv(t, true)
	e.fail("openai", "primary", "gpt-4o", credentialRejected, 401)
	e.waitHold("openai.primary", hold.StateHeld)
	e.readyz(http.StatusOK, readyBody)

	js, err := jetstream.New(e.pnc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(context.Background(), bus.BucketHolds); err != nil {
		t.Fatal(err)
	}
	e.readyz(http.StatusServiceUnavailable, jsDownBody)

	pins := []struct{ id, body string }{
		{"openai._", `{"provider":"openai","duration":"30m","reason":"whole provider"}`},
		{"openai.secondary", `{"provider":"openai","key":"secondary","duration":"30m"}`},
		{"openai._.gpt-4o", `{"provider":"openai","model":"gpt-4o","duration":"30m"}`},
	}
	for _, p := range pins {
		r := e.do("POST", "/admin/holds", opToken, p.body)
		r.expect(t, http.StatusAccepted, "")
		h, _ := r.body["hold"].(map[string]any)
		if r.body["status"] != "queued" || r.body["id"] != p.id || r.body["message"] == "" ||
			h["id"] != p.id || h["pinned"] != true || h["state"] != "held" {
			t.Fatalf("pin %s while JetStream is down: %s", p.id, r.raw)
		}
		// applied here at once
		if g := e.do("GET", "/admin/holds/"+p.id, readToken, nil); g.status != 200 || g.body["pinned"] != true {
			t.Fatalf("GET %s after a queued pin: %d %s", p.id, g.status, g.raw)
		}
	}
	// the stand-in proxy's held key: released here, queued
	r := e.do("DELETE", "/admin/holds/openai.primary", opToken, nil)
	r.expect(t, http.StatusAccepted, "")
	if h, _ := r.body["hold"].(map[string]any); r.body["status"] != "queued" || h["state"] != "released" {
		t.Fatalf("release while JetStream is down: %s", r.raw)
	}
	e.readyz(http.StatusServiceUnavailable, jsDownBody)

	// JetStream takes writes again: every queued change lands as answered
	if _, err := bus.Setup(context.Background(), js, bus.SetupOptionsFrom(e.cfg)); err != nil {
		t.Fatal(err)
	}
	e.readyz(http.StatusOK, readyBody)
	for _, p := range pins {
		testkit.CheckFor(t, testTimeout, 20*time.Millisecond, func() error {
			rec, err := e.stored(p.id)
			if err != nil {
				return err
			}
			if !rec.Pinned || rec.State != hold.StateHeld || rec.Source != hold.SourceAdmin {
				return fmt.Errorf("stored %+v", rec)
			}
			return nil
		})
	}
	testkit.CheckFor(t, testTimeout, 20*time.Millisecond, func() error {
		rec, err := e.stored("openai.primary")
		if err != nil {
			return err
		}
		if rec.State != hold.StateReleased {
			return fmt.Errorf("openai.primary is %s", rec.State)
		}
		return nil
	})
}

// TestWritesRefusedWhileNATSDown: with NATS down the admin answers 503 to
// writes and changes nothing, so when NATS comes back nothing of them
// lands (a later write does).
func TestWritesRefusedWhileNATSDown(t *testing.T) {
	e := startEnvWith(t, envOptions{withKey: true, fileStore: true})
	e.fail("openai", "primary", "gpt-4o", credentialRejected, 401)
	e.waitHold("openai.primary", hold.StateHeld)
	e.readyz(http.StatusOK, readyBody)

	stopServer(e)
	e.readyz(http.StatusServiceUnavailable, natsDownBody)
	e.do("POST", "/admin/holds", opToken, `{"provider":"openai","key":"secondary","duration":"30m"}`).expect(t, http.StatusServiceUnavailable, codeNATSUnavailable)
	e.do("DELETE", "/admin/holds/openai.primary", opToken, nil).expect(t, http.StatusServiceUnavailable, codeNATSUnavailable)
	e.do("POST", "/admin/providers/openai/reset", opToken, nil).expect(t, http.StatusServiceUnavailable, codeNATSUnavailable)
	if g := e.do("GET", "/admin/holds/openai.secondary", readToken, nil); g.status != http.StatusNotFound {
		t.Fatalf("refused pin in the table: %d %s", g.status, g.raw)
	}

	restartServer(e)
	e.readyz(http.StatusOK, readyBody)
	// a write after the restart lands; the refused ones were never queued
	// and are nowhere
	e.do("POST", "/admin/holds", opToken, `{"provider":"local","duration":"30m"}`).expect(t, http.StatusCreated, "")
	testkit.CheckFor(t, testTimeout, 20*time.Millisecond, func() error {
		_, err := e.stored("local._")
		return err
	})
	if _, err := e.stored("openai.secondary"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("refused pin openai.secondary: %v", err)
	}
	rec, err := e.stored("openai.primary")
	if err != nil || rec.State != hold.StateHeld {
		t.Fatalf("refused release of openai.primary: %+v %v", rec, err)
	}
	for _, id := range []string{"openai.secondary", "openai.primary"} {
		g := e.do("GET", "/admin/holds/"+id, readToken, nil)
		if id == "openai.secondary" && g.status != http.StatusNotFound || id == "openai.primary" && g.body["state"] != "held" {
			t.Fatalf("admin's table after the restart: %s %d %s", id, g.status, g.raw)
		}
	}
}

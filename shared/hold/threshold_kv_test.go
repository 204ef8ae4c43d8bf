package hold_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/holdkv"
	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/shared/testkit"
)

// TestSuccessThresholdOnKV: two engines on the real switchyard_holds
// bucket (embedded NATS), breaker success_threshold 3. A tripped breaker's
// hold is probed by caller requests of either engine: the first two
// successful probes leave it held (probe_successes 1, then 2, in the
// bucket) and due at once, the third releases it.
func TestSuccessThresholdOnKV(t *testing.T) {
	ns := natstest.Start(t, "127.0.0.1:0", "")
	pol := hold.DefaultPolicy()
	pol.Global.CallerGrace = 0
	pol.Global.Jitter = 0
	pol.Global.Breaker.Cooldown = 200 * time.Millisecond
	pol.Global.Breaker.SuccessThreshold = 3
	pol.Providers = map[string]*hold.Settings{"p": &pol.Global}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var reader *holdkv.Store
	var engines []*hold.Engine
	for _, name := range []string{"proxy-a", "proxy-b"} {
		_, js := testkit.ConnectNATS(t, ns.ClientURL())
		res, err := bus.Setup(ctx, js, bus.SetupOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := holdkv.NewStore(js, res.Holds, nil)
		reader = st
		e := hold.NewEngine(hold.EngineOptions{Store: st, Instance: name, Policy: pol})
		wg.Go(func() { _ = e.Run(ctx) })
		testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
			select {
			case <-st.Synced():
				return nil
			default:
				return fmt.Errorf("%s: hold table not loaded", name)
			}
		})
		engines = append(engines, e)
	}
	stored := func() (hold.Record, error) {
		return reader.Get(ctx, "p._")
	}

	for range 5 {
		engines[0].Report("p", "k", "m", false, hold.Outcome{Status: 503, Result: failure.Result{Class: failure.Transient, Code: "server_error"}})
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		r, err := stored()
		if err != nil {
			return err
		}
		if r.State != hold.StateHeld || r.Source != hold.SourceBreaker {
			return fmt.Errorf("trip hold %+v", r)
		}
		return nil
	})

	for n := 1; n <= 3; n++ {
		// the next probe goes to whichever engine takes the lease
		var owner *hold.Engine
		testkit.CheckFor(t, 10*time.Second, 2*time.Millisecond, func() error {
			for _, e := range engines {
				if e.Admit("p", "k", "m") == hold.AdmitProbe {
					owner = e
					return nil
				}
			}
			return fmt.Errorf("probe %d not handed out", n)
		})
		owner.Report("p", "k", "m", true, hold.Outcome{OK: true})
		testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
			r, err := stored()
			if err != nil {
				return err
			}
			switch {
			case n < 3 && (r.State != hold.StateHeld || r.ProbeSuccesses != n || r.Probe != nil):
				return fmt.Errorf("after %d successes: %s with probe_successes %d, want held with %d", n, r.State, r.ProbeSuccesses, n)
			case n < 3 && r.Until.After(time.Now()):
				return fmt.Errorf("after %d successes due at %s, want at once", n, r.Until)
			case n == 3 && r.State != hold.StateReleased:
				return fmt.Errorf("after 3 successes: %s, want released", r.State)
			}
			return nil
		})
	}
	for _, e := range engines {
		testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
			if st := e.BreakerStates()["p"]; st != "closed" {
				return fmt.Errorf("%s: breaker %s", e.Instance(), st)
			}
			return nil
		})
	}
}

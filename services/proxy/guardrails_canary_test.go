package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
)

// canary is in every matched text of TestGuardrailCanary.
const canary = "7f3e9c"

// TestGuardrailCanary: what guardrails match (an address redacted on the
// way in and out, a word blocked in a request, an answer and a stream)
// reaches no log line (at debug level), event, usage record, debug bundle
// or metric; each block is one guardrail event, and each usage record
// names the strongest verdict, its guardrail and stage.
func TestGuardrailCanary(t *testing.T) {
	oa, an := startFakes(t)
	cfg := baseConfig(oa, an)
	cfg.Guardrails = []config.Guardrail{
		{Name: "no-mail", Stage: config.StageBoth, Action: config.ActionRedact, Patterns: []string{"email"}},
		{Name: "no-word", Stage: config.StageBoth, Deny: []string{"CANARY-" + canary}},
	}
	cfg.Clients[0].Guardrails = []string{"no-mail", "no-word"}
	cfg.Clients[0].Plan = "pro"
	cfg.Plans = map[string]config.Plan{"pro": {}}
	all := 1.0
	cfg.Debug.Enabled, cfg.Debug.SampleSuccesses = bptr(true), &all
	ns := startNATS(t, t.TempDir(), "127.0.0.1:0")
	t.Cleanup(func() { natsembed.Stop(ns) })
	nc, js := testkit.ConnectNATS(t, ns.ClientURL())
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, url := startService(t, cfg, Deps{Log: log, NATS: nc})
	select {
	case <-svc.member.Bound():
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy never bound the fleet's buckets")
	}
	var mu sync.Mutex
	var events []*nats.Msg
	sub, err := nc.Subscribe("switchyard.events.>", func(m *nats.Msg) {
		mu.Lock()
		events = append(events, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	f := &fixture{openai: oa, anthropic: an, cfg: cfg, svc: svc, url: url}

	mail := "ops." + canary + "@example.com"
	word := "canary-" + canary
	ask := func(content string, stream bool) string {
		b, _ := json.Marshal(map[string]any{"model": "demo-chat", "stream": stream,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		return string(b)
	}
	// 1: redacted on the way in; 2: blocked on the way in
	if st, _, body := f.call(t, "/v1/chat/completions", ask("write to "+mail, false)); st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	// (a request refused before any attempt keeps its bundle only when
	// its caller asks)
	if st, _, body := f.call(t, "/v1/chat/completions", ask("say "+word, false), "X-Switchyard-Debug", "true"); st != 400 {
		t.Fatalf("%d %s", st, body)
	}
	// 3: an answer redacted; 4: an answer blocked; 5: a stream blocked
	scriptAnswer(f, []string{"reach ", mail, " today"})
	if st, _, body := f.call(t, "/v1/chat/completions", ask("hi", false)); st != 200 || bytes.Contains(body, []byte(canary)) {
		t.Fatalf("%d %s", st, body)
	}
	scriptAnswer(f, []string{"it is ", word})
	if st, _, body := f.call(t, "/v1/chat/completions", ask("hi", false)); st != 400 {
		t.Fatalf("%d %s", st, body)
	}
	scriptAnswer(f, []string{"it is CANARY-", canary[:3], canary[3:], " and on"})
	if _, evs := f.stream(t, "/v1/chat/completions", ask("hi", true)); len(evs) == 0 || !strings.Contains(evs[len(evs)-1].data, "guardrail_blocked") {
		t.Fatalf("stream events %+v", evs)
	}
	for _, c := range oa.Calls() {
		if bytes.Contains(c.Body, []byte(canary)) {
			t.Errorf("went upstream: %s", c.Body)
		}
	}

	// usage records: the strongest verdict of each request
	recs := readUsage(t, js, 5)
	want := [][3]string{{"redact", "no-mail", "input"}, {"block", "no-word", "input"},
		{"redact", "no-mail", "output"}, {"block", "no-word", "output"}, {"block", "no-word", "output"}}
	for i, rec := range recs {
		if got := [3]string{rec.Guardrail, rec.GuardrailName, rec.GuardrailStage}; got != want[i] {
			t.Errorf("usage record %d: guardrail %v, want %v", i, got, want[i])
		}
	}

	// events: one per block
	var blocks []hold.Event
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		blocks = blocks[:0]
		for _, m := range events {
			if strings.HasPrefix(m.Subject, "switchyard.events.guardrail.") {
				var ev hold.Event
				if err := json.Unmarshal(m.Data, &ev); err != nil {
					return err
				}
				if m.Subject != "switchyard.events.guardrail.team" {
					t.Errorf("guardrail event on %s", m.Subject)
				}
				blocks = append(blocks, ev)
			}
		}
		if len(blocks) != 3 {
			return fmt.Errorf("%d guardrail events", len(blocks))
		}
		return nil
	})
	for i, stage := range []string{"input", "output", "output"} {
		ev := blocks[i]
		if ev.Kind != hold.EventGuardrail || ev.Outcome != "blocked" || ev.Guardrail != "no-word" || ev.Stage != stage ||
			ev.Client != "team" || ev.Plan != "pro" || ev.RequestID == "" || ev.Route != "chain:demo-chat" || ev.HoldID != "" {
			t.Errorf("event %d: %+v", i, ev)
		}
	}

	// bundles: every one (they are sampled at 1), read raw
	s, err := js.Stream(context.Background(), debug.Stream)
	if err != nil {
		t.Fatal(err)
	}
	var raw [][]byte
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		raw = readAll(t, s)
		if len(raw) < 5 {
			return fmt.Errorf("%d bundles", len(raw))
		}
		return nil
	})

	mu.Lock()
	defer mu.Unlock()
	places := map[string]string{"logs": logs.String(), "metrics": scrape(t, url)}
	for _, m := range events {
		places["event "+m.Subject] = string(m.Data)
	}
	for i, b := range raw {
		places["bundle "+string(rune('0'+i))] = string(b)
	}
	for i, rec := range recs {
		b, _ := json.Marshal(rec)
		places["usage record "+string(rune('0'+i))] = string(b)
	}
	for where, text := range places {
		if strings.Contains(strings.ToLower(text), canary) {
			t.Errorf("the matched text reached %s: %s", where, grepLines(text, canary))
		}
	}
	if !strings.Contains(places["logs"], "guardrail blocked the stream") || !strings.Contains(places["metrics"], `guardrail="no-word"`) {
		t.Error("the canary's places hold nothing of the guardrails: the test reads the wrong places")
	}
}

// readAll is every message of stream s, in order.
func readAll(t *testing.T, s jetstream.Stream) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		out = append(out, m.Data)
	}
	return out
}

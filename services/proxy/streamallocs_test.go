package proxy

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/config"
)

// streamOf is a chat stream of events content chunks: a role chunk, the
// chunks, a finish chunk and [DONE].
func streamOf(events int) []byte {
	var b bytes.Buffer
	b.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	for range events {
		b.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"}}]}\n\n")
	}
	b.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	return b.Bytes()
}

// streamRig is a proxy in front of an upstream that answers every chat
// request with streamOf(events), each event flushed on its own, and a
// client of the proxy: do sends one stream request and reads it whole.
type streamRig struct {
	do func()
}

func newStreamRig(tb testing.TB, events int) *streamRig {
	tb.Helper()
	stream := streamOf(events)
	parts := bytes.SplitAfter(stream, []byte("\n\n"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	up := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		c.SetContentType("text/event-stream")
		c.SetBodyStreamWriter(func(w *bufio.Writer) {
			for _, ev := range parts {
				_, _ = w.Write(ev)
				_ = w.Flush()
			}
		})
	}}
	go func() { _ = up.Serve(ln) }()
	tb.Cleanup(func() { _ = up.Shutdown() })
	cfg := config.Defaults()
	cfg.Log.Level = "warn"
	cfg.Providers = []config.Provider{{Name: "up", Type: "openai", BaseURL: "http://" + ln.Addr().String() + "/v1",
		Keys:   []config.Key{{ID: "k1", Weight: 1, Value: config.NewSecret("sk-1")}},
		Models: []config.Model{{Name: "bench-model", Kind: "chat"}}}}
	cfg.Aliases = map[string]string{"bench": "up/bench-model"}
	cfg.Clients = []config.ClientKey{{ID: "bench", Models: []string{"*"}, Value: config.NewSecret(clientSecret)}}
	return &streamRig{do: benchChat(tb, cfg, Deps{}, `{"model":"bench","stream":true,"messages":[{"role":"user","content":"hi"}]}`)}
}

// TestStreamEventsAllocateNothing: a relayed stream's events, passed
// through untranslated, allocate nothing: a stream of 512 events costs
// the allocations of one of 8 (the whole process's: upstream, proxy and
// client, each event its own flush upstream).
func TestStreamEventsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	per := map[int]float64{}
	for _, events := range []int{8, 512} {
		rig := newStreamRig(t, events)
		for range 30 {
			rig.do()
		}
		per[events] = testing.AllocsPerRun(200, rig.do)
	}
	if d := (per[512] - per[8]) / 504; d > 0.01 {
		t.Errorf("%.3f allocations per event (%.1f a stream of 8 events, %.1f of 512)", d, per[8], per[512])
	}
	t.Logf("allocations per stream: %.1f (8 events), %.1f (512 events)", per[8], per[512])
}

// BenchmarkProxyStreamEvents relays streams of 8 and 512 events (each
// flushed on its own by the upstream) through the proxy: per stream, and
// allocations per event (the difference over the events between).
func BenchmarkProxyStreamEvents(b *testing.B) {
	for _, events := range []int{8, 512} {
		b.Run(strconv.Itoa(events), func(b *testing.B) {
			rig := newStreamRig(b, events)
			b.ReportAllocs()
			for b.Loop() {
				rig.do()
			}
		})
	}
}

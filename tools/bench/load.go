package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// target is one path to the upstream the bench measures.
type target struct {
	Name string // direct, switchyard, floor
	Addr string // host:port
	Auth string // Authorization header the load generator sends
}

// modeSpec is a load pattern: sequential (one connection, closed loop),
// open (a fixed arrival rate, bounded in-flight workers), or closed
// (saturation: Conns connections sending back to back).
type modeSpec struct {
	Name  string  `json:"name"`
	Kind  string  `json:"kind"` // sequential, open, closed
	Rate  float64 `json:"rate,omitempty"`
	Conns int     `json:"connections"`
}

// parseMode reads seq, rate<N> (N requests/s) or sat<N> (N connections).
func parseMode(s string, workers int) (modeSpec, error) {
	num := func(prefix string) (int, error) {
		n, err := strconv.Atoi(strings.TrimPrefix(s, prefix))
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("mode %q: want %s<positive number>", s, prefix)
		}
		return n, nil
	}
	switch {
	case s == "seq":
		return modeSpec{Name: s, Kind: "sequential", Conns: 1}, nil
	case strings.HasPrefix(s, "rate"):
		n, err := num("rate")
		return modeSpec{Name: s, Kind: "open", Rate: float64(n), Conns: workers}, err
	case strings.HasPrefix(s, "sat"):
		n, err := num("sat")
		return modeSpec{Name: s, Kind: "closed", Conns: n}, err
	}
	return modeSpec{}, fmt.Errorf("unknown mode %q (want seq, rate<N> or sat<N>)", s)
}

// chatBody is the OpenAI chat completion the load generator posts.
func chatBody(model string, stream bool) []byte {
	s := ""
	if stream {
		s = `,"stream":true`
	}
	return []byte(`{"model":"` + model + `","messages":[{"role":"system","content":"You are a terse assistant."},` +
		`{"role":"user","content":"Name five colours, one word each."}],"max_tokens":32,"temperature":0` + s + `}`)
}

// loader sends one kind of request to one target and records the outcome.
type loader struct {
	hc     *fasthttp.HostClient
	uri    string
	auth   string
	body   []byte
	stream bool

	total *histogram // end of the answer, from the intended send time
	ttft  *histogram // first content chunk (streams), from the same origin
	ok    atomic.Uint64
	errs  atomic.Uint64

	mu        sync.Mutex
	errSample string
}

func newLoader(t target, conns int, stream bool, body []byte) *loader {
	return &loader{
		hc: &fasthttp.HostClient{
			Addr:                     t.Addr,
			MaxConns:                 conns,
			MaxConnWaitTimeout:       10 * time.Second,
			StreamResponseBody:       stream,
			ReadTimeout:              15 * time.Second,
			WriteTimeout:             15 * time.Second,
			MaxIdleConnDuration:      time.Minute,
			NoDefaultUserAgentHeader: true,
		},
		uri:    "http://" + t.Addr + "/v1/chat/completions",
		auth:   t.Auth,
		body:   body,
		stream: stream,
		total:  &histogram{},
		ttft:   &histogram{},
	}
}

// reset forgets what was recorded (after the warmup), keeping connections.
func (l *loader) reset() {
	l.total, l.ttft = &histogram{}, &histogram{}
	l.ok.Store(0)
	l.errs.Store(0)
	l.errSample = ""
}

func (l *loader) fail(err error) {
	if l.errs.Add(1) == 1 {
		l.mu.Lock()
		l.errSample = err.Error()
		l.mu.Unlock()
	}
}

// one sends a request and charges its latency from `from`.
func (l *loader) one(from time.Time, buf *[]byte) {
	first, err := l.do(buf)
	done := time.Now()
	if err != nil {
		l.fail(err)
		return
	}
	l.ok.Add(1)
	l.total.Record(done.Sub(from))
	if l.stream {
		l.ttft.Record(first.Sub(from))
	}
}

var (
	doneEvent = []byte("data: [DONE]")
	choices   = []byte(`"choices"`)
	errTrunc  = errors.New("stream ended without data: [DONE]")
)

// do sends the request; for a stream it returns when the first content
// chunk arrived, and reads the stream to its end.
func (l *loader) do(buf *[]byte) (time.Time, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(l.uri)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set(fasthttp.HeaderAuthorization, l.auth)
	req.SetBodyRaw(l.body)
	if err := l.hc.Do(req, resp); err != nil {
		return time.Time{}, err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		b := resp.Body()
		return time.Time{}, fmt.Errorf("status %d: %.200s", resp.StatusCode(), b)
	}
	if !l.stream {
		if !bytes.Contains(resp.Body(), choices) {
			return time.Time{}, fmt.Errorf("answer without choices: %.200s", resp.Body())
		}
		return time.Time{}, nil
	}
	r := resp.BodyStream()
	if r == nil {
		return time.Time{}, errors.New("stream: no body stream")
	}
	acc := (*buf)[:0]
	var first time.Time
	for {
		if len(acc) == cap(acc) {
			acc = append(acc, 0)[:len(acc)]
		}
		n, err := r.Read(acc[len(acc):cap(acc)])
		acc = acc[:len(acc)+n]
		if first.IsZero() && n > 0 && hasContent(acc) {
			first = time.Now()
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			*buf = acc
			return time.Time{}, fmt.Errorf("read stream: %w", err)
		}
	}
	*buf = acc
	_ = resp.CloseBodyStream()
	if !bytes.Contains(acc, doneEvent) {
		return time.Time{}, errTrunc
	}
	if first.IsZero() {
		return time.Time{}, errors.New("stream without content")
	}
	return first, nil
}

// hasContent reports whether an SSE stream so far holds a chunk with
// non-empty "content" (the role chunk's "content":"" does not count).
func hasContent(b []byte) bool {
	key := []byte(`"content":`)
	for {
		i := bytes.Index(b, key)
		if i < 0 {
			return false
		}
		b = b[i+len(key):]
		b = bytes.TrimLeft(b, " ")
		if len(b) >= 2 && b[0] == '"' && b[1] != '"' {
			return true
		}
	}
}

// closedLoop runs workers that each send back to back for d, and returns
// how long it took until the last answer.
func (l *loader) closedLoop(ctx context.Context, workers int, d time.Duration) time.Duration {
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, 0, 4<<10)
			for ctx.Err() == nil {
				now := time.Now()
				if !now.Before(deadline) {
					return
				}
				l.one(now, &buf)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// openLoop sends rate requests per second for d from up to workers
// goroutines, each request charged from its intended send time. Requests
// still unsent grace after d count as errors. It returns the time from the
// first intended send to the last answer.
func (l *loader) openLoop(ctx context.Context, rate float64, workers int, d, grace time.Duration) time.Duration {
	sched := newSchedule(time.Now().Add(time.Millisecond), rate, d)
	ctx, cancel := context.WithDeadline(ctx, sched.start.Add(d+grace))
	defer cancel()
	jobs := make(chan time.Time, sched.n)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, 0, 4<<10)
			for at := range jobs {
				if ctx.Err() != nil {
					l.fail(fmt.Errorf("not sent within %s of the end: %w", grace, ctx.Err()))
					continue
				}
				l.one(at, &buf)
			}
		})
	}
	sent := 0
	for sent < sched.n && ctx.Err() == nil {
		for due := sched.Due(time.Now()); sent < due; sent++ {
			jobs <- sched.At(sent)
		}
		if sent < sched.n {
			time.Sleep(time.Until(sched.At(sent)))
		}
	}
	for ; sent < sched.n; sent++ {
		l.fail(fmt.Errorf("not scheduled: %w", ctx.Err()))
	}
	close(jobs)
	wg.Wait()
	return time.Since(sched.start)
}

// run drives the loader in mode m for d.
func (l *loader) run(ctx context.Context, m modeSpec, d time.Duration) time.Duration {
	switch m.Kind {
	case "open":
		return l.openLoop(ctx, m.Rate, m.Conns, d, 10*time.Second)
	default:
		return l.closedLoop(ctx, m.Conns, d)
	}
}

// cellResult is one target measured in one mode.
type cellResult struct {
	Mode        string   `json:"mode"`
	Stream      bool     `json:"stream"`
	Target      string   `json:"target"`
	OfferedRPS  float64  `json:"offered_rps,omitempty"`
	Connections int      `json:"connections"`
	Seconds     float64  `json:"seconds"`
	OK          uint64   `json:"ok"`
	Errors      uint64   `json:"errors"`
	ErrorSample string   `json:"error_sample,omitempty"`
	Throughput  float64  `json:"throughput_rps"`
	Latency     summary  `json:"latency"`
	TTFT        *summary `json:"ttft,omitempty"`
}

// primary is the latency the comparisons use: time to first token for a
// stream, the whole answer otherwise.
func (c *cellResult) primary() summary {
	if c.TTFT != nil {
		return *c.TTFT
	}
	return c.Latency
}

// measure warms the target up in mode m, then measures it for d.
func measure(ctx context.Context, t target, m modeSpec, stream bool, body []byte, warmup, d time.Duration) cellResult {
	l := newLoader(t, m.Conns, stream, body)
	defer l.hc.CloseIdleConnections()
	if warmup > 0 {
		l.run(ctx, m, warmup)
		l.reset()
	}
	elapsed := l.run(ctx, m, d)
	res := cellResult{
		Mode: m.Name, Stream: stream, Target: t.Name, OfferedRPS: m.Rate, Connections: m.Conns,
		Seconds: elapsed.Seconds(), OK: l.ok.Load(), Errors: l.errs.Load(), ErrorSample: l.errSample,
		Latency: l.total.Summary(),
	}
	res.Throughput = float64(res.OK) / elapsed.Seconds()
	if stream {
		s := l.ttft.Summary()
		res.TTFT = &s
	}
	return res
}

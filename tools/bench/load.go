package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
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
	Auth string // Authorization header the load generator sends ("": none)
	// Model is the model the requests ask for ("": the run's default);
	// Headers are extra request headers (a peer's configuration).
	Model   string
	Headers []header
	// Proc is the process whose CPU time and system calls are charged to
	// the target's requests; nil for direct.
	Proc *child
}

// usage is what the target's process has used so far (zero for direct).
func (t target) usage() (usage, error) {
	if t.Proc == nil {
		return usage{}, nil
	}
	return t.Proc.usage()
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
	extra  []header // more request headers
	body   []byte
	stream bool

	total  *histogram // end of the answer, from the intended send time
	ttft   *histogram // first content chunk (streams), from the same origin
	ok     atomic.Uint64
	errs   atomic.Uint64
	unsent atomic.Uint64 // of errs: requests never sent

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
		extra:  t.Headers,
		body:   body,
		stream: stream,
		total:  &histogram{},
		ttft:   &histogram{},
	}
}

// scratch is a loader on l's connections that records apart from l: a
// warmup's requests are sent through it.
func (l *loader) scratch() *loader {
	return &loader{hc: l.hc, uri: l.uri, auth: l.auth, extra: l.extra, body: l.body, stream: l.stream,
		total: &histogram{}, ttft: &histogram{}}
}

// failUnsent counts a request that was never sent (an open loop's
// backlog at the end): an error, but no work of the target's process.
func (l *loader) failUnsent(err error) {
	l.unsent.Add(1)
	l.fail(err)
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
	if l.auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, l.auth)
	}
	for _, h := range l.extra {
		req.Header.Set(h.Name, h.Value)
	}
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
					l.failUnsent(fmt.Errorf("not sent within %s of the end: %w", grace, ctx.Err()))
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
		l.failUnsent(fmt.Errorf("not scheduled: %w", ctx.Err()))
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
	Rounds      int      `json:"rounds"`
	Seconds     float64  `json:"seconds"`
	OK          uint64   `json:"ok"`
	Errors      uint64   `json:"errors"`
	ErrorSample string   `json:"error_sample,omitempty"`
	Throughput  float64  `json:"throughput_rps"`
	Latency     summary  `json:"latency"`
	TTFT        *summary `json:"ttft,omitempty"`
	// CPU is what the target's process used while it was measured (not
	// during warmups), per request; nil for direct.
	CPU *cpuCost `json:"cpu,omitempty"`
	// Where is CPU split by where its last turn's perf samples fell
	// (-perf); nil without it, and for direct.
	Where *perfSplit `json:"where,omitempty"`
	// Turns are the target's turns, in the order of the rounds: how much
	// its figures move within one run.
	Turns []turn `json:"turns"`
}

// turn is what one turn of a target served, and at what CPU cost.
type turn struct {
	Throughput float64 `json:"throughput_rps"`
	CPUUs      float64 `json:"cpu_us_per_request,omitempty"` // 0 for direct
}

// targetRun is a target's share of measure: its loader and what its turns
// added up to.
type targetRun struct {
	t       target
	l       *loader
	elapsed time.Duration
	used    usage
	where   *perfSplit
	turns   []turn
}

// turn measures one turn of d, its process sampled by perf into perfOut
// (when not "").
func (ru *targetRun) turn(ctx context.Context, m modeSpec, d time.Duration, perfOut string) error {
	var rec *perfRecording // stopped or aborted before turn returns
	if perfOut != "" {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		if rec, err = startPerf(ru.t.Proc.cmd.Process.Pid, perfOut); err != nil {
			return err
		}
	}
	before, err := ru.t.usage()
	if err != nil {
		rec.abort()
		return err
	}
	ok0, served0 := ru.l.counts()
	took := ru.l.run(ctx, m, d)
	after, err := ru.t.usage()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		rec.abort()
		return err
	}
	if rec != nil {
		split, err := rec.stop()
		if err != nil {
			return fmt.Errorf("perf of %s: %w", ru.t.Name, err)
		}
		ru.where = &split
	}
	used := after.sub(before)
	ok1, served1 := ru.l.counts()
	ru.elapsed += took
	ru.used = ru.used.add(used)
	ru.turns = append(ru.turns, newTurn(ok1-ok0, served1-served0, took, used))
	return nil
}

// newTurn is a turn of took that answered ok requests and served (ok,
// failed, but sent) requests for used.
func newTurn(ok, served uint64, took time.Duration, used usage) turn {
	var t turn
	if took > 0 {
		t.Throughput = float64(ok) / took.Seconds()
	}
	if served > 0 {
		t.CPUUs = (us(used.User) + us(used.Sys)) / float64(served)
	}
	return t
}

// counts are the requests answered so far, and those served (answered or
// failed, not counting the ones never sent): what throughput and CPU per
// request divide by.
func (l *loader) counts() (ok, served uint64) {
	ok = l.ok.Load()
	return ok, ok + l.errs.Load() - l.unsent.Load()
}

// cpuCost is a process's CPU time and system calls over the requests it
// served while measured.
type cpuCost struct {
	Process  string  `json:"process"`
	Used     usage   `json:"used"`
	Requests uint64  `json:"requests"`
	UserUs   float64 `json:"user_us_per_request"`
	SysUs    float64 `json:"sys_us_per_request"`
	TotalUs  float64 `json:"cpu_us_per_request"` // user + sys
	Syscalls float64 `json:"syscalls_per_request"`
}

func newCPUCost(process string, u usage, requests uint64) *cpuCost {
	c := &cpuCost{Process: process, Used: u, Requests: requests}
	if requests > 0 {
		n := float64(requests)
		c.UserUs, c.SysUs = us(u.User)/n, us(u.Sys)/n
		c.TotalUs = c.UserUs + c.SysUs
		c.Syscalls = float64(u.Reads+u.Writes) / n
	}
	return c
}

// primary is the latency the comparisons use: time to first token for a
// stream, the whole answer otherwise.
func (c *cellResult) primary() summary {
	if c.TTFT != nil {
		return *c.TTFT
	}
	return c.Latency
}

// rewarm is the warmup of a target before each round after its first:
// the connections are open already, this only brings the process back
// to the load after another target's turn.
const rewarm = 250 * time.Millisecond

// measure measures the targets in mode m, interleaved: rounds turns, each
// target measured for d/rounds per turn, the order rotating by one each
// round and reversed on odd rounds (so no target is always measured
// first, nor always right after the same other), each turn after a warmup (the whole warmup on a target's first
// turn, at most rewarm after). A target's latencies, counts and process
// usage add up over its turns. Interleaving spreads the machine's drift
// (other processes, heat, the upstream's own state) over every target
// instead of charging it to whichever ran at the time. With perfDir (not
// ""), each target's process is sampled with perf during its last turn,
// into a file there.
func measure(ctx context.Context, ts []target, m modeSpec, stream bool, body func(target) []byte, warmup, d time.Duration, rounds int, perfDir string) ([]cellResult, error) {
	runs := make([]*targetRun, len(ts))
	for i, t := range ts {
		runs[i] = &targetRun{t: t, l: newLoader(t, m.Conns, stream, body(t))}
		defer runs[i].l.hc.CloseIdleConnections()
	}
	turn := d / time.Duration(rounds)
	for r := range rounds {
		for j := range runs {
			if r%2 == 1 {
				j = len(runs) - 1 - j
			}
			ru := runs[(j+r)%len(runs)]
			if w := warmup; w > 0 {
				if r > 0 {
					w = min(w, rewarm)
				}
				ru.l.scratch().run(ctx, m, w)
			}
			perfOut := ""
			if perfDir != "" && r == rounds-1 && perfSplits(ru.t) {
				perfOut = filepath.Join(perfDir, fmt.Sprintf("perf-%s-%s-%s.data", m.Name, kindName(stream), ru.t.Name))
			}
			if err := ru.turn(ctx, m, turn, perfOut); err != nil {
				return nil, err
			}
		}
	}
	out := make([]cellResult, len(runs))
	for i, ru := range runs {
		l := ru.l
		res := cellResult{
			Mode: m.Name, Stream: stream, Target: ru.t.Name, OfferedRPS: m.Rate, Connections: m.Conns, Rounds: rounds,
			Seconds: ru.elapsed.Seconds(), OK: l.ok.Load(), Errors: l.errs.Load(), ErrorSample: l.errSample,
			Latency: l.total.Summary(),
		}
		res.Throughput = float64(res.OK) / ru.elapsed.Seconds()
		res.Turns = ru.turns
		if stream {
			s := l.ttft.Summary()
			res.TTFT = &s
		}
		if p := ru.t.Proc; p != nil {
			res.CPU = newCPUCost(p.name, ru.used, res.OK+res.Errors-l.unsent.Load())
			if ru.where != nil {
				ru.where.charge(res.CPU)
				res.Where = ru.where
			}
		}
		out[i] = res
	}
	return out, nil
}

package fakeprovider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server is a fake provider. Create it with New (serve it through Handler)
// or Start (it listens itself); stop it with Close.
type Server struct {
	opts    Options
	log     *slog.Logger
	models  map[string]bool
	handler http.Handler
	clock   Clock
	limiter *limiter

	mu       sync.Mutex
	rules    []*Rule // oldest first; matched newest first
	ruleSeq  int
	calls    []*Call // shared with the calls' answers, which set their Status
	closed   bool
	inflight sync.WaitGroup

	seq       atomic.Uint64
	active    atomic.Int64  // provider API calls being served
	peak      atomic.Int64  // the most at once since the last ResetPeak
	done      chan struct{} // closed by Close: ends hangs and delays
	closeOnce sync.Once
	closeErr  error

	ln     net.Listener
	srv    *http.Server
	served chan struct{}
}

var _ http.Handler = (*Server)(nil)

// New returns a server that does not listen; serve it through Handler.
// Invalid initial rules are logged and kept (use Options.Validate first).
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Chunks == 0 {
		opts.Chunks = DefaultChunks
	}
	if opts.MaxCalls == 0 {
		opts.MaxCalls = DefaultMaxCalls
	}
	if len(opts.Models) == 0 {
		opts.Models = slices.Clone(DefaultModels)
	}
	if opts.Clock == nil {
		opts.Clock = systemClock{}
	}
	s := &Server{
		opts:    opts,
		log:     opts.Log.With("fakeprovider", opts.Name),
		models:  make(map[string]bool, len(opts.Models)),
		clock:   opts.Clock,
		limiter: newLimiter(opts.Clock, opts.RateLimit),
		done:    make(chan struct{}),
	}
	for _, m := range opts.Models {
		s.models[m] = true
	}
	s.handler = s.routes()
	for _, r := range opts.Rules {
		if err := r.Validate(); err != nil {
			s.log.Warn("invalid rule", "rule", r.ID, "err", err)
		}
		s.AddRule(r)
	}
	return s
}

// Start validates opts, listens on opts.Addr (127.0.0.1:0 when empty) and
// serves until Close.
func Start(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("start fake provider %q: %w", opts.Name, err)
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("start fake provider %q: listen %s: %w", opts.Name, addr, err)
	}
	s := New(opts)
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve", "err", err)
		}
	}()
	s.log.Info("fake provider listening", "url", s.URL())
	return s, nil
}

// URL returns the base URL ("http://127.0.0.1:port", no path); "" when the
// server was not started with Start.
func (s *Server) URL() string {
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// Addr returns the listen address ("127.0.0.1:port"); "" when the server was
// not started with Start.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Handler returns the server's HTTP handler: the provider APIs and the
// control endpoint under /_fake/.
func (s *Server) Handler() http.Handler { return s }

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		http.Error(w, "fake provider closed", http.StatusServiceUnavailable)
		return
	}
	defer s.inflight.Done()
	if !strings.HasPrefix(r.URL.Path, "/_fake/") {
		n := s.active.Add(1)
		defer s.active.Add(-1)
		for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
		}
	}
	s.handler.ServeHTTP(w, r)
}

// PeakInFlight is the most provider API calls (the control endpoint
// aside) the server was serving at once since it started or since the
// last ResetPeak.
func (s *Server) PeakInFlight() int { return int(s.peak.Load()) }

// InFlight is the provider API calls the server is serving now: a call
// leaves when its handler returns, which for a stream or a delayed answer
// is soon after the client closes its connection.
func (s *Server) InFlight() int { return int(s.active.Load()) }

// ResetPeak starts PeakInFlight over from the calls being served now.
func (s *Server) ResetPeak() { s.peak.Store(s.active.Load()) }

func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inflight.Add(1)
	return true
}

// Close stops listening, closes every connection (hung ones included) and
// waits for all handlers to return. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.done)
		if s.srv != nil {
			if err := s.srv.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				s.closeErr = fmt.Errorf("close fake provider %q: %w", s.opts.Name, err)
			}
			<-s.served
		}
		s.inflight.Wait()
	})
	return s.closeErr
}

// Shutdown stops accepting calls and lets calls in flight finish until ctx
// ends; then it closes whatever is left (hung calls) like Close.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	if s.srv != nil {
		if err = s.srv.Shutdown(ctx); err != nil {
			err = fmt.Errorf("shut down fake provider %q: %w", s.opts.Name, err)
		}
	}
	return errors.Join(err, s.Close())
}

// AddRule adds r as the newest rule and returns its ID (r.ID when set; a
// rule with the same ID is replaced).
func (s *Server) AddRule(r Rule) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.ID == "" {
		s.ruleSeq++
		r.ID = "r" + strconv.Itoa(s.ruleSeq)
	} else {
		s.removeRuleLocked(r.ID)
	}
	s.rules = append(s.rules, &r)
	return r.ID
}

// RemoveRule removes the rule with this ID, if any.
func (s *Server) RemoveRule(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeRuleLocked(id)
}

func (s *Server) removeRuleLocked(id string) bool {
	n := len(s.rules)
	s.rules = slices.DeleteFunc(s.rules, func(r *Rule) bool { return r.ID == id })
	return len(s.rules) != n
}

// ClearRules removes every rule.
func (s *Server) ClearRules() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = nil
}

// Rules returns the current rules, oldest first, with their remaining Times.
func (s *Server) Rules() []Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Rule, len(s.rules))
	for i, r := range s.rules {
		out[i] = *r
	}
	return out
}

// admit finds the newest rule matching the call and, with a rate limit
// set, has the limiter count the call (req.limit): a call the limiter
// refuses is marked RateLimited and leaves the rules untouched. Otherwise
// admit returns a copy of the rule and counts its Times down; nil when no
// rule matches.
func (s *Server) admit(req *request) *Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.findRuleLocked(&req.call)
	if req.endpoint.limited() {
		chunks := s.opts.Chunks
		if i >= 0 && s.rules[i].Chunks > 0 {
			chunks = s.rules[i].Chunks
		}
		if v, ok := s.limiter.admit(req.call.Key, req.call.Model, callTokens(req, chunks)); ok {
			req.limit = &v
			if v.refused != notRefused {
				req.call.RateLimited = true
				return nil
			}
		}
	}
	if i < 0 {
		return nil
	}
	r := s.rules[i]
	matched := *r
	if r.Times > 0 {
		r.Times--
		if r.Times == 0 {
			s.rules = slices.Delete(s.rules, i, i+1)
		}
	}
	return &matched
}

// findRuleLocked returns the index of the newest rule matching the call,
// -1 when none does.
func (s *Server) findRuleLocked(c *Call) int {
	for i := len(s.rules) - 1; i >= 0; i-- {
		r := s.rules[i]
		if (r.Key != "" && r.Key != c.Key) ||
			(r.Model != "" && r.Model != c.Model) ||
			(r.Path != "" && !strings.HasSuffix(c.Path, r.Path)) {
			continue
		}
		if r.Probability > 0 && rand.Float64() >= r.Probability {
			continue
		}
		return i
	}
	return -1
}

// Calls returns the recorded calls, oldest first.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Call, len(s.calls))
	for i, c := range s.calls {
		out[i] = *c
	}
	return out
}

// CallsFor returns the recorded calls that presented key.
func (s *Server) CallsFor(key string) []Call {
	return s.CallsMatching(func(c Call) bool { return c.Key == key })
}

// CallsMatching returns the recorded calls for which match reports true.
func (s *Server) CallsMatching(match func(Call) bool) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if match(*c) {
			out = append(out, *c)
		}
	}
	return out
}

// CountCalls counts the recorded calls for which match reports true (every
// call when match is nil).
func (s *Server) CountCalls(match func(Call) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if match == nil {
		return len(s.calls)
	}
	n := 0
	for _, c := range s.calls {
		if match(*c) {
			n++
		}
	}
	return n
}

// ResetCalls forgets the recorded calls.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

// record adds the call to the log and returns the entry, whose Status
// setStatus fills in.
func (s *Server) record(c Call) *Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) >= s.opts.MaxCalls {
		// Drop the oldest half at once, into a new slice so memory is freed.
		keep := s.opts.MaxCalls / 2
		s.calls = append(make([]*Call, 0, s.opts.MaxCalls), s.calls[len(s.calls)-keep:]...)
	}
	s.calls = append(s.calls, &c)
	return &c
}

// setStatus records the status a call was answered with.
func (s *Server) setStatus(c *Call, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.Status = status
}

// statusWriter records the status of a call's answer in its log entry as
// the headers are written, before the client can see them.
type statusWriter struct {
	http.ResponseWriter
	s     *Server
	call  *Call
	wrote bool
}

func (w *statusWriter) WriteHeader(status int) {
	if !w.wrote && status >= 200 {
		w.wrote = true
		w.s.setStatus(w.call, status)
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController flush and hijack the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wait blocks for d; false when the call or the server ended first.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	}
}

// newID returns a unique id with the given prefix, e.g. "chatcmpl-".
func (s *Server) newID(prefix string) string {
	return fmt.Sprintf("%s%s%08x%04x", prefix, idLabel(s.opts.Name), rand.Uint32(), s.seq.Add(1)&0xffff)
}

func idLabel(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	if b.Len() > 0 {
		b.WriteByte('_')
	}
	return b.String()
}

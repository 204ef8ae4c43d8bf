package planlimit

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/kvwatch"
)

// benchLimiter is a limiter that knows 1,000 clients, each with a request
// counted, and sees two other instances' reports for every window of
// client-0500 (so admission sums the fleet, as in production).
func benchLimiter(b *testing.B) (*Limiter, *Limits) {
	b.Helper()
	l, err := New(Options{Instance: "proxy-a"})
	if err != nil {
		b.Fatal(err)
	}
	lim := &Limits{Plan: "pro", RequestsPerMinute: 1 << 40, TokensPerMinute: 1 << 40, ConcurrentRequests: 1 << 30,
		Budget: config.Budget{Day: 1e12, Week: 1e12, Month: 1e12}}
	for i := range 1000 {
		tk, r := l.Admit(fmt.Sprintf("client-%04d", i), lim, 0)
		if r != nil {
			b.Fatal(r)
		}
		l.Done(tk, 10, 0.001, true)
	}
	now := time.Now()
	m, _ := minuteOf(now)
	p := periodsOn(now)
	rev := uint64(0)
	for _, inst := range []string{"proxy-b", "proxy-c"} {
		for _, w := range []win{{kindReq, m}, {kindReq, m - 1}, {kindTok, m}, {kindTok, m - 1}, {kindInflight, 0},
			{kindDay, p.ids[0]}, {kindWeek, p.ids[1]}, {kindMonth, p.ids[2]}} {
			rev++
			l.apply(kvwatch.Event{Op: kvwatch.OpPut, Key: countKey("client-0500", w, inst),
				Value: encodeCount(w.k, 3, 0.5, 2*time.Second), Revision: rev})
		}
	}
	if u := l.Snapshot("client-0500"); u.InFlight != 6 {
		b.Fatalf("the other instances' reports were not applied: %+v", u)
	}
	return l, lim
}

// BenchmarkAdmitDone: one request of an active client, admitted and done,
// with 1,000 clients known.
func BenchmarkAdmitDone(b *testing.B) {
	l, lim := benchLimiter(b)
	b.ReportAllocs()
	for b.Loop() {
		tk, r := l.Admit("client-0500", lim, 0.001)
		if r != nil {
			b.Fatal(r)
		}
		l.Done(tk, 100, 0.001, true)
	}
}

// BenchmarkAdmitDoneParallel: every goroutine on its own client, then all
// on the same one (one client's lock contended).
func BenchmarkAdmitDoneParallel(b *testing.B) {
	for _, mode := range []string{"distinct-clients", "one-client"} {
		b.Run(mode, func(b *testing.B) {
			l, lim := benchLimiter(b)
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id := "client-0500"
				if mode == "distinct-clients" {
					id = fmt.Sprintf("client-%04d", next.Add(1)%1000)
				}
				for pb.Next() {
					tk, r := l.Admit(id, lim, 0.001)
					if r != nil {
						b.Error(r)
						return
					}
					l.Done(tk, 100, 0.001, true)
				}
			})
		})
	}
}

// BenchmarkAdmitRefused: a refused request (the Refusal and its message
// are built).
func BenchmarkAdmitRefused(b *testing.B) {
	l, _ := benchLimiter(b)
	lim := &Limits{Plan: "pro", RequestsPerMinute: 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, r := l.Admit("client-0500", lim, 0); r == nil {
			b.Fatal("admitted")
		}
	}
}

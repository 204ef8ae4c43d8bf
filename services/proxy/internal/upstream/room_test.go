package upstream

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/headroom"
)

// TestReadRoomAllocatesNothing: an answer's rate-limit headers are read
// on the request path without allocating, as fasthttp holds them.
func TestReadRoomAllocatesNothing(t *testing.T) {
	var h fasthttp.ResponseHeader
	for k, v := range map[string]string{"Content-Type": "application/json", "x-ratelimit-limit-requests": "10000",
		"x-ratelimit-remaining-requests": "9999", "x-ratelimit-reset-requests": "6ms", "x-ratelimit-limit-tokens": "30000000",
		"x-ratelimit-remaining-tokens": "29999980", "x-ratelimit-reset-tokens": "0s", "retry-after": "2"} {
		h.Set(k, v)
	}
	now := time.Now()
	var rd headroom.Reading
	if !ReadRoom(headroom.DialectOpenAI, &h, now, &rd) || rd.Windows[headroom.Tokens].Remaining != 29999980 ||
		rd.Windows[headroom.Requests].Reset != now.Add(6*time.Millisecond).UnixNano() || rd.RetryAfter != 2*time.Second {
		t.Fatalf("reading %+v", rd)
	}
	if n := testing.AllocsPerRun(100, func() { ReadRoom(headroom.DialectOpenAI, &h, now, &rd) }); n != 0 {
		t.Errorf("%v allocations per answer", n)
	}
}

func BenchmarkReadRoom(b *testing.B) {
	var h fasthttp.ResponseHeader
	for k, v := range map[string]string{"Content-Type": "application/json", "Date": "Wed, 02 Dec 2026 16:00:00 GMT",
		"x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "9999", "x-ratelimit-reset-requests": "6ms",
		"x-ratelimit-limit-tokens": "30000000", "x-ratelimit-remaining-tokens": "29999980", "x-ratelimit-reset-tokens": "0s",
		"X-Request-Id": "req_1", "Openai-Processing-Ms": "120"} {
		h.Set(k, v)
	}
	now := time.Now()
	var rd headroom.Reading
	b.Run("collected", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ReadRoom(headroom.DialectOpenAI, &h, now, &rd)
		}
	})
	b.Run("peek", func(b *testing.B) { // fasthttp's Peek per name, for comparison
		b.ReportAllocs()
		for b.Loop() {
			headroom.Parse(headroom.DialectOpenAI, &h, now, &rd)
		}
	})
}

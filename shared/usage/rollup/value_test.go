package rollup

import (
	"testing"
	"time"
)

// TestValueTTL: a value's TTL, in whole seconds as NATS keeps it, never
// ends before its bucket Expires (a report would read the bucket as kept
// and find it gone), and is at least a second.
func TestValueTTL(t *testing.T) {
	res := Resolutions(0, 0, 0)[0]
	start := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	exp := res.Expires(start)
	for _, c := range []struct {
		left, want time.Duration
	}{
		{2400 * time.Millisecond, 3 * time.Second}, // rounded to the nearest: 2 s, expired 0.4 s early
		{2600 * time.Millisecond, 3 * time.Second},
		{3 * time.Second, 3 * time.Second},
		{time.Nanosecond, time.Second},
		{0, time.Second},
		{-time.Minute, time.Second},
		{res.Width + res.Keep, res.Width + res.Keep},
	} {
		got := valueTTL(res, start, exp.Add(-c.left))
		if got != c.want || got%time.Second != 0 {
			t.Errorf("%s before it expires: TTL %s, want %s", c.left, got, c.want)
		}
	}
}

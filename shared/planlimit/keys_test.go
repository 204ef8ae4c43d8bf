package planlimit

import (
	"testing"
	"time"
)

func TestKeysRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  string
		want parsedKey
	}{
		{"requests", "team-a.req.m28949040.proxy-1", parsedKey{keyCount, "team-a", win{kindReq, 28949040}, "proxy-1"}},
		{"tokens", "team_b.tok.m5.p", parsedKey{keyCount, "team_b", win{kindTok, 5}, "p"}},
		{"day", "c.usd.d20250115.p", parsedKey{keyCount, "c", win{kindDay, 20250115}, "p"}},
		{"week", "c.usd.w2020W53.p", parsedKey{keyCount, "c", win{kindWeek, 202053}, "p"}},
		{"month", "c.usd.m202501.p", parsedKey{keyCount, "c", win{kindMonth, 202501}, "p"}},
		{"in flight", "c.inflight.p", parsedKey{keyCount, "c", win{k: kindInflight}, "p"}},
		{"exhausted", "c.exhausted.w2025W03", parsedKey{keyExhausted, "c", win{kindWeek, 202503}, ""}},
		{"reset", "c.reset", parsedKey{typ: keyReset, client: "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseKey(tc.key)
			if !ok || got != tc.want {
				t.Fatalf("parseKey(%q) = %+v, %v; want %+v", tc.key, got, ok, tc.want)
			}
			var back string
			switch got.typ {
			case keyCount:
				back = countKey(got.client, got.w, got.instance)
			case keyExhausted:
				back = exhaustedKey(got.client, got.w)
			case keyReset:
				back = resetKey(got.client)
			}
			if back != tc.key {
				t.Errorf("formatted back as %q", back)
			}
		})
	}
	for _, bad := range []string{"", "c", "c.req.m1", "c.req.x1.p", "c.req.m-1.p", "c.usd.d2025011.p", "c.usd.q202501.p",
		"c.exhausted.m2025", "c.inflight", "c.inflight.a.b", "c:d.reset", "c.other.x.y", "c.usd.wxxxxWyy.p"} {
		if pk, ok := parseKey(bad); ok {
			t.Errorf("parseKey(%q) accepted: %+v", bad, pk)
		}
	}
}

func TestSanitizeInstance(t *testing.T) {
	for in, want := range map[string]string{
		"proxy-ip-10-0-0-1.ec2.internal-4f2a1c": "proxy-ip-10-0-0-1_ec2_internal-4f2a1c",
		"proxy-host-4f2a1c":                     "proxy-host-4f2a1c",
		"a b:c/d":                               "a_b_c_d",
		"":                                      "_",
	} {
		if got := SanitizeInstance(in); got != want {
			t.Errorf("SanitizeInstance(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPeriods(t *testing.T) {
	for _, tc := range []struct {
		name             string
		at               time.Time
		day, week, month string
		weekStarts       time.Time
		monthEnds        time.Time
	}{
		{"wednesday", time.Date(2025, 1, 15, 12, 0, 0, 0, time.UTC), "d20250115", "w2025W03", "m202501",
			time.Date(2025, 1, 13, 0, 0, 0, 0, time.UTC), time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)},
		{"sunday ends the ISO week", time.Date(2025, 1, 19, 23, 59, 59, 0, time.UTC), "d20250119", "w2025W03", "m202501",
			time.Date(2025, 1, 13, 0, 0, 0, 0, time.UTC), time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)},
		{"ISO year before the calendar year", time.Date(2021, 1, 3, 8, 0, 0, 0, time.UTC), "d20210103", "w2020W53", "m202101",
			time.Date(2020, 12, 28, 0, 0, 0, 0, time.UTC), time.Date(2021, 2, 1, 0, 0, 0, 0, time.UTC)},
		{"ISO year after the calendar year", time.Date(2024, 12, 31, 0, 0, 0, 0, time.UTC), "d20241231", "w2025W01", "m202412",
			time.Date(2024, 12, 30, 0, 0, 0, 0, time.UTC), time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"local time is read as UTC", time.Date(2025, 3, 1, 1, 0, 0, 0, time.FixedZone("CET", 3600)), "d20250301", "w2025W09", "m202503",
			time.Date(2025, 2, 24, 0, 0, 0, 0, time.UTC), time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := periodsOn(tc.at)
			got := [3]string{periodToken(kindDay, p.ids[0]), periodToken(kindWeek, p.ids[1]), periodToken(kindMonth, p.ids[2])}
			if got != [3]string{tc.day, tc.week, tc.month} {
				t.Errorf("periods %v, want %s %s %s", got, tc.day, tc.week, tc.month)
			}
			if !p.start[1].Equal(tc.weekStarts) || !p.ends[1].Equal(tc.weekStarts.AddDate(0, 0, 7)) {
				t.Errorf("week %v - %v, want from %v", p.start[1], p.ends[1], tc.weekStarts)
			}
			if !p.ends[2].Equal(tc.monthEnds) {
				t.Errorf("month ends %v, want %v", p.ends[2], tc.monthEnds)
			}
			for i, id := range got {
				k, n, ok := parsePeriod(id)
				if !ok || k != kindDay+kind(i) || n != p.ids[i] {
					t.Errorf("parsePeriod(%q) = %v %d %v", id, k, n, ok)
				}
			}
		})
	}
}

func TestSlidingWait(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		cur, prev, max, frac float64
		want                 time.Duration
	}{
		{"current minute at the limit", 60, 0, 60, 0.5, 30 * time.Second},
		{"current minute over the limit", 80, 0, 60, 0.5, 45 * time.Second},
		{"previous minute must weigh less", 30, 60, 60, 0.25, 15 * time.Second},
		{"already below", 10, 10, 60, 0.5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := slidingWait(tc.cur, tc.prev, tc.max, tc.frac); (got - tc.want).Abs() > time.Millisecond {
				t.Errorf("slidingWait = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValues(t *testing.T) {
	for _, tc := range []struct {
		k    kind
		n    int64
		usd  float64
		want string
	}{
		{kindReq, 12, 0, `{"v":1,"n":12}`},
		{kindInflight, 2, 0, `{"v":1,"n":2,"ttl_s":3}`},
		{kindDay, 0, 0.125, `{"v":1,"usd":0.125}`},
	} {
		got := encodeCount(tc.k, tc.n, tc.usd, 3*time.Second)
		if string(got) != tc.want {
			t.Errorf("encodeCount = %s, want %s", got, tc.want)
		}
		v, err := decodeCount(tc.k, got)
		if err != nil || v.v != float64(tc.n)+tc.usd {
			t.Errorf("decodeCount(%s) = %+v, %v", got, v, err)
		}
	}
	for _, bad := range []string{`{"v":2,"n":1}`, `{"v":1}`, `[]`, `{"v":1,"usd":1}`} {
		if _, err := decodeCount(kindReq, []byte(bad)); err == nil {
			t.Errorf("decodeCount(%s) accepted", bad)
		}
	}
}

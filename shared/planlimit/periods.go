package planlimit

import "time"

// periods are the budget periods (UTC) current on one day.
type periods struct {
	day   int64        // unix day number the entry is for
	ids   [3]int64     // day YYYYMMDD, week ISO year*100+week, month YYYYMM
	ends  [3]time.Time // when each period ends
	start [3]time.Time // when each period began
}

// periodsOn computes the periods current at t.
func periodsOn(t time.Time) *periods {
	u := t.UTC()
	y, mo, d := u.Date()
	day := time.Date(y, mo, d, 0, 0, 0, 0, time.UTC)
	wy, ww := u.ISOWeek()
	week := day.AddDate(0, 0, -((int(u.Weekday()) + 6) % 7)) // back to Monday
	month := time.Date(y, mo, 1, 0, 0, 0, 0, time.UTC)
	return &periods{
		day:   floorDiv(u.Unix(), 86400),
		ids:   [3]int64{int64(y)*10000 + int64(mo)*100 + int64(d), int64(wy)*100 + int64(ww), int64(y)*100 + int64(mo)},
		start: [3]time.Time{day, week, month},
		ends:  [3]time.Time{day.AddDate(0, 0, 1), week.AddDate(0, 0, 7), month.AddDate(0, 1, 0)},
	}
}

// periodsAt returns the periods current at t, computed once a day.
func (l *Limiter) periodsAt(t time.Time) *periods {
	d := floorDiv(t.Unix(), 86400)
	if p := l.per.Load(); p != nil && p.day == d {
		return p
	}
	p := periodsOn(t)
	l.per.Store(p)
	return p
}

// minuteOf is the minute index of t (unix seconds / 60) and the fraction
// of that minute elapsed.
func minuteOf(t time.Time) (int64, float64) {
	ns := t.UnixNano()
	m := floorDiv(ns, int64(time.Minute))
	return m, float64(ns-m*int64(time.Minute)) / float64(time.Minute)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

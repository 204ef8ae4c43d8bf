package headroom

// Readers of header values from bytes, without allocating: counts,
// durations, RFC 3339 times and HTTP dates.

import (
	"math"
	"time"
)

// trim drops the optional whitespace around a header value.
func trim(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// parseCount reads a non-negative decimal integer (surrounding
// whitespace allowed).
func parseCount(b []byte) (int64, bool) {
	b = trim(b)
	if len(b) == 0 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > (math.MaxInt64-9)/10 {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// leadingNumber reads the non-negative decimal number at the start of b
// the way time.ParseDuration does: its integer part v, its fraction f
// over scale, and how many bytes it took (0: no number).
func leadingNumber(b []byte) (v, f uint64, scale float64, n int) {
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if v > (1<<63-1)/10 {
			return 0, 0, 0, 0
		}
		v = v*10 + uint64(b[i]-'0')
		if v > 1<<63 {
			return 0, 0, 0, 0
		}
	}
	digits := i > 0
	scale = 1
	if i < len(b) && b[i] == '.' {
		j := i + 1
		overflow := false
		for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
			if overflow || f > (1<<63-1)/10 {
				overflow = true // further digits cannot matter
				continue
			}
			y := f*10 + uint64(b[j]-'0')
			if y > 1<<63 {
				overflow = true
				continue
			}
			f = y
			scale *= 10
		}
		if j > i+1 {
			digits = true
		}
		if digits {
			i = j
		}
	}
	if !digits {
		return 0, 0, 0, 0
	}
	return v, f, scale, i
}

// scaled is v + f/scale units in nanoseconds, if at most maxAhead.
func scaled(v, f uint64, scale float64, unit int64) (time.Duration, bool) {
	if v > uint64(maxAhead)/uint64(unit) {
		return 0, false
	}
	d := v * uint64(unit)
	if f > 0 {
		d += uint64(float64(f) * (float64(unit) / scale))
	}
	if d > uint64(maxAhead) {
		return 0, false
	}
	return time.Duration(d), true
}

// parseNumber reads a non-negative decimal number of units ("20",
// "1.5"), at most maxAhead.
func parseNumber(b []byte, unit int64) (time.Duration, bool) {
	v, f, scale, n := leadingNumber(b)
	if n == 0 || n != len(b) {
		return 0, false
	}
	return scaled(v, f, scale, unit)
}

// durationUnits are the units of a Go duration (and "d", days), "ms"
// before "m" (the first that matches is taken).
var durationUnits = [...]struct {
	name string
	unit int64
}{
	{"ns", int64(time.Nanosecond)},
	{"us", int64(time.Microsecond)},
	{"\u00b5s", int64(time.Microsecond)}, // micro sign
	{"\u03bcs", int64(time.Microsecond)}, // Greek mu
	{"ms", int64(time.Millisecond)},
	{"s", int64(time.Second)},
	{"m", int64(time.Minute)},
	{"h", int64(time.Hour)},
	{"d", 24 * int64(time.Hour)},
}

// parseDuration reads a non-negative duration as time.ParseDuration
// does ("1h2m3s", "2m59.56s", "20ms", "0s"), or a bare number of seconds
// ("20", "7.66"), at most maxAhead.
func parseDuration(b []byte) (time.Duration, bool) {
	if d, ok := parseNumber(b, int64(time.Second)); ok {
		return d, true
	}
	if len(b) == 0 {
		return 0, false
	}
	var total time.Duration
	for len(b) > 0 {
		v, f, scale, n := leadingNumber(b)
		if n == 0 {
			return 0, false
		}
		b = b[n:]
		unit := int64(0)
		for _, u := range durationUnits {
			if len(b) >= len(u.name) && string(b[:len(u.name)]) == u.name {
				unit = u.unit
				b = b[len(u.name):]
				break
			}
		}
		if unit == 0 {
			return 0, false
		}
		d, ok := scaled(v, f, scale, unit)
		if !ok || d > maxAhead-total {
			return 0, false
		}
		total += d
	}
	return total, true
}

// parseRFC3339 reads an RFC 3339 time ("2024-06-24T18:12:37Z",
// "2024-06-24T18:12:37.5+02:00"; 't' or ' ' for 'T', 'z' for 'Z') from
// 1970 on: seconds and nanoseconds past the epoch.
func parseRFC3339(b []byte) (sec, nsec int64, ok bool) {
	if len(b) < len("2006-01-02T15:04:05Z") || b[4] != '-' || b[7] != '-' ||
		(b[10] != 'T' && b[10] != 't' && b[10] != ' ') || b[13] != ':' || b[16] != ':' {
		return 0, 0, false
	}
	year, ok1 := digits(b[0:4])
	month, ok2 := digits(b[5:7])
	day, ok3 := digits(b[8:10])
	hour, ok4 := digits(b[11:13])
	minute, ok5 := digits(b[14:16])
	second, ok6 := digits(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || year < 1970 || month < 1 || month > 12 ||
		day < 1 || day > daysIn(year, month) || hour > 23 || minute > 59 || second > 59 {
		return 0, 0, false
	}
	rest := b[19:]
	if rest[0] == '.' {
		i, scale := 1, int64(time.Second)
		for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9'; i++ {
			if scale > 1 {
				scale /= 10
				nsec += int64(rest[i]-'0') * scale
			}
		}
		if i == 1 {
			return 0, 0, false
		}
		rest = rest[i:]
	}
	var offset int64
	switch {
	case len(rest) == 1 && (rest[0] == 'Z' || rest[0] == 'z'):
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, okh := digits(rest[1:3])
		om, okm := digits(rest[4:6])
		if !okh || !okm || oh > 23 || om > 59 {
			return 0, 0, false
		}
		offset = oh*3600 + om*60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return 0, 0, false
	}
	sec = daysSinceEpoch(year, month, day)*86400 + hour*3600 + minute*60 + second - offset
	return sec, nsec, true
}

// parseHTTPDate reads an HTTP date in its preferred form (IMF-fixdate,
// "Wed, 21 Oct 2015 07:28:00 GMT") from 1970 on: seconds past the epoch.
func parseHTTPDate(b []byte) (int64, bool) {
	if len(b) != len("Mon, 02 Jan 2006 15:04:05 GMT") || b[3] != ',' || b[4] != ' ' ||
		b[7] != ' ' || b[11] != ' ' || b[16] != ' ' || b[19] != ':' || b[22] != ':' ||
		string(b[25:]) != " GMT" {
		return 0, false
	}
	if !oneOf(b[0:3], "MonTueWedThuFriSatSun") {
		return 0, false
	}
	month := int64(0)
	for i := 0; i < 12; i++ {
		if string(b[8:11]) == monthNames[3*i:3*i+3] {
			month = int64(i + 1)
			break
		}
	}
	day, ok1 := digits(b[5:7])
	year, ok2 := digits(b[12:16])
	hour, ok3 := digits(b[17:19])
	minute, ok4 := digits(b[20:22])
	second, ok5 := digits(b[23:25])
	if !(ok1 && ok2 && ok3 && ok4 && ok5) || month == 0 || year < 1970 ||
		day < 1 || day > daysIn(year, month) || hour > 23 || minute > 59 || second > 59 {
		return 0, false
	}
	return daysSinceEpoch(year, month, day)*86400 + hour*3600 + minute*60 + second, true
}

const monthNames = "JanFebMarAprMayJunJulAugSepOctNovDec"

// oneOf reports whether the three bytes b are one of the three-letter
// names packed in names.
func oneOf(b []byte, names string) bool {
	for i := 0; i+3 <= len(names); i += 3 {
		if string(b) == names[i:i+3] {
			return true
		}
	}
	return false
}

// digits reads a fixed-width run of decimal digits.
func digits(b []byte) (int64, bool) {
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// daysIn is the number of days in a month of a year.
func daysIn(year, month int64) int64 {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysSinceEpoch is the number of days from 1970-01-01 to a date of the
// proleptic Gregorian calendar from 1970 on (Howard Hinnant's
// days_from_civil).
func daysSinceEpoch(year, month, day int64) int64 {
	if month <= 2 {
		year--
	}
	era := year / 400
	yoe := year - era*400
	doy := (153*((month+9)%12)+2)/5 + day - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

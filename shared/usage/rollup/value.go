package rollup

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"switchyard.dev/shared/usage"
)

// Resolution is one width of time bucket and how long its buckets are
// kept after they end.
type Resolution struct {
	// Name is minute, hour or day: the first token of its keys.
	Name  string
	Width time.Duration
	Keep  time.Duration
}

// Default retention of each resolution (metering.rollups).
const (
	DefaultMinuteKeep = 48 * time.Hour
	DefaultHourKeep   = 90 * 24 * time.Hour
	DefaultDayKeep    = 2 * 365 * 24 * time.Hour
)

// Resolutions returns minute, hour and day (finest first) kept for the
// given durations; 0 takes the default.
func Resolutions(minute, hour, day time.Duration) []Resolution {
	or := func(d, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d
	}
	return []Resolution{
		{Name: "minute", Width: time.Minute, Keep: or(minute, DefaultMinuteKeep)},
		{Name: "hour", Width: time.Hour, Keep: or(hour, DefaultHourKeep)},
		{Name: "day", Width: 24 * time.Hour, Keep: or(day, DefaultDayKeep)},
	}
}

// Start returns the start of the bucket holding t (UTC: day buckets
// start at midnight UTC).
func (r Resolution) Start(t time.Time) time.Time { return t.UTC().Truncate(r.Width) }

// Expires returns when the bucket starting at start is gone: Keep after
// its end.
func (r Resolution) Expires(start time.Time) time.Time { return start.Add(r.Width + r.Keep) }

// Kept reports whether the bucket starting at start is still kept at now.
func (r Resolution) Kept(start, now time.Time) bool { return now.Before(r.Expires(start)) }

// SchemaVersion is the version of Value's JSON form, its "v".
const SchemaVersion = 1

// MaxCells bounds the cells of one stored value. A cell is a few hundred
// bytes of sums and two sketches of at most a few KiB (about 1.5 KiB each
// for latencies between 1 ms and 10 min), so 128 cells stay well below
// NATS's default max payload (1 MiB). A bucket's provider with more cells
// takes more values (parts 1, 2, ...): nothing is dropped or merged away.
const MaxCells = 128

// Value is one stored rollup value: the cells of one time bucket of one
// resolution for one provider, part Part (a provider's cells beyond
// MaxCells go to the next part). Through is the highest Through of its
// cells.
type Value struct {
	V          int       `json:"v"`
	Resolution string    `json:"resolution"`
	Start      time.Time `json:"start"`
	Provider   string    `json:"provider"`
	Part       int       `json:"part"`
	Through    uint64    `json:"through"`
	Cells      []*Cell   `json:"cells"`
}

// Key is the KV key of a value: <resolution>.<start, Unix seconds>.<provider
// token>.<part>, the provider token written as in usage subjects ("_" for
// none).
func Key(res string, start time.Time, provider string, part int) string {
	return BucketPrefix(res, start) + ProviderToken(provider) + "." + strconv.Itoa(part)
}

// BucketPrefix is the start of the keys of one time bucket, ending in a
// dot: <resolution>.<start>.
func BucketPrefix(res string, start time.Time) string {
	return res + "." + strconv.FormatInt(start.Unix(), 10) + "."
}

// ProviderToken is the token usage.Subject writes for a provider name.
func ProviderToken(provider string) string {
	s := strings.TrimPrefix(usage.Subject(provider, ""), usage.SubjectPrefix+".")
	return strings.TrimSuffix(s, "._")
}

// check reports a stored value that is not of the key it was read from.
func (v *Value) check(key string) error {
	if v.V != SchemaVersion {
		return fmt.Errorf("rollup value %s: schema version %d, want %d", key, v.V, SchemaVersion)
	}
	if want := Key(v.Resolution, v.Start, v.Provider, v.Part); want != key {
		return fmt.Errorf("rollup value %s: holds %s", key, want)
	}
	return nil
}

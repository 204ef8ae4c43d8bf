package planlimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SchemaVersion is the "v" of every value this package writes to the
// bucket. Values with another version are skipped (and logged), so a newer
// writer cannot be misread by an older reader.
const SchemaVersion = 1

// kind is what a counter counts, and for spend the period it sums over.
type kind uint8

const (
	kindReq kind = iota
	kindTok
	kindInflight
	kindDay
	kindWeek
	kindMonth
)

// Period names, in the order of the period kinds (day, week, month).
var periodNames = [3]string{"day", "week", "month"}

// win is one counter window: a minute index for requests and tokens, a
// period id (YYYYMMDD, ISO year*100+week, YYYYMM) for spend, 0 for in flight.
type win struct {
	k  kind
	id int64
}

// The key tokens.
const (
	tokReq       = "req"
	tokTok       = "tok"
	tokUSD       = "usd"
	tokInflight  = "inflight"
	tokExhausted = "exhausted"
	tokReset     = "reset"
)

// ProviderBudgetPrefix starts the limiter id of a provider's budget
// (_provider_<name> in switchyard_limits and on the budget events'
// subjects): client ids start with a letter or digit, so none collides.
const ProviderBudgetPrefix = "_provider_"

// validID reports whether s may be one key token: [A-Za-z0-9_-]+.
func validID(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !idByte(s[i]) {
			return false
		}
	}
	return true
}

func idByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-'
}

// SanitizeInstance makes s usable as one key token: every byte outside
// [A-Za-z0-9_-] becomes '_' (fleet.InstanceID includes the host name,
// which may contain dots). An empty s becomes "_".
func SanitizeInstance(s string) string {
	if validID(s) {
		return s
	}
	if s == "" {
		return "_"
	}
	b := []byte(s)
	for i, c := range b {
		if !idByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

// periodToken is the window token of a period: d20250114, w2025W03,
// m202501.
func periodToken(k kind, id int64) string {
	switch k {
	case kindDay:
		return fmt.Sprintf("d%08d", id)
	case kindWeek:
		return fmt.Sprintf("w%04dW%02d", id/100, id%100)
	case kindMonth:
		return fmt.Sprintf("m%06d", id)
	}
	return ""
}

// parsePeriod reads a period token.
func parsePeriod(s string) (kind, int64, bool) {
	digits := func(s string) (int64, bool) {
		if s == "" {
			return 0, false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, false
			}
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	switch {
	case len(s) == 9 && s[0] == 'd':
		n, ok := digits(s[1:])
		return kindDay, n, ok
	case len(s) == 8 && s[0] == 'w' && s[5] == 'W':
		y, ok1 := digits(s[1:5])
		w, ok2 := digits(s[6:])
		return kindWeek, y*100 + w, ok1 && ok2
	case len(s) == 7 && s[0] == 'm':
		n, ok := digits(s[1:])
		return kindMonth, n, ok
	}
	return 0, 0, false
}

// countKey is the key of a counter this instance reports.
func countKey(client string, w win, instance string) string {
	switch w.k {
	case kindReq:
		return client + "." + tokReq + ".m" + strconv.FormatInt(w.id, 10) + "." + instance
	case kindTok:
		return client + "." + tokTok + ".m" + strconv.FormatInt(w.id, 10) + "." + instance
	case kindInflight:
		return client + "." + tokInflight + "." + instance
	default:
		return client + "." + tokUSD + "." + periodToken(w.k, w.id) + "." + instance
	}
}

func exhaustedKey(client string, w win) string {
	return client + "." + tokExhausted + "." + periodToken(w.k, w.id)
}

func resetKey(client string) string { return client + "." + tokReset }

// keyType says which of the key shapes a key has.
type keyType uint8

const (
	keyCount keyType = iota + 1
	keyExhausted
	keyReset
)

type parsedKey struct {
	typ      keyType
	client   string
	w        win
	instance string
}

// parseKey reads a key of the bucket; ok is false for anything else.
func parseKey(key string) (pk parsedKey, ok bool) {
	t := strings.Split(key, ".")
	if len(t) < 2 || !validID(t[0]) {
		return pk, false
	}
	pk.client = t[0]
	switch {
	case len(t) == 2 && t[1] == tokReset:
		pk.typ = keyReset
		return pk, true
	case len(t) == 3 && t[1] == tokInflight && validID(t[2]):
		pk.typ, pk.w, pk.instance = keyCount, win{k: kindInflight}, t[2]
		return pk, true
	case len(t) == 3 && t[1] == tokExhausted:
		k, id, ok := parsePeriod(t[2])
		pk.typ, pk.w = keyExhausted, win{k, id}
		return pk, ok
	case len(t) == 4 && (t[1] == tokReq || t[1] == tokTok) && validID(t[3]):
		if len(t[2]) < 2 || t[2][0] != 'm' {
			return pk, false
		}
		m, err := strconv.ParseInt(t[2][1:], 10, 64)
		if err != nil || m < 0 {
			return pk, false
		}
		k := kindReq
		if t[1] == tokTok {
			k = kindTok
		}
		pk.typ, pk.w, pk.instance = keyCount, win{k, m}, t[3]
		return pk, true
	case len(t) == 4 && t[1] == tokUSD && validID(t[3]):
		k, id, ok := parsePeriod(t[2])
		pk.typ, pk.w, pk.instance = keyCount, win{k, id}, t[3]
		return pk, ok
	}
	return pk, false
}

// encodeCount is the value of a counter key: {"v":1,"n":N} for requests
// and tokens, {"v":1,"usd":X} for spend, {"v":1,"n":N,"ttl_s":T} for in
// flight (T: the key's TTL in seconds, which the writer renews at half).
func encodeCount(k kind, n int64, usd float64, ttl time.Duration) []byte {
	if k >= kindDay {
		b := strconv.AppendFloat([]byte(`{"v":1,"usd":`), usd, 'g', -1, 64)
		return append(b, '}')
	}
	b := strconv.AppendInt([]byte(`{"v":1,"n":`), n, 10)
	if k == kindInflight {
		b = strconv.AppendInt(append(b, `,"ttl_s":`...), int64(ttl/time.Second), 10)
	}
	return append(b, '}')
}

// counterValue is a decoded counter value.
type counterValue struct {
	v   float64       // the count or spend (counts are exact)
	ttl time.Duration // in flight: the writer's TTL (0: not given)
}

// decodeCount reads a counter value.
func decodeCount(k kind, data []byte) (counterValue, error) {
	var v struct {
		V    int      `json:"v"`
		N    *int64   `json:"n"`
		USD  *float64 `json:"usd"`
		TTLS int64    `json:"ttl_s"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return counterValue{}, err
	}
	if v.V != SchemaVersion {
		return counterValue{}, fmt.Errorf("schema version %d, want %d", v.V, SchemaVersion)
	}
	if k >= kindDay {
		if v.USD == nil {
			return counterValue{}, errors.New("no usd")
		}
		return counterValue{v: *v.USD}, nil
	}
	if v.N == nil {
		return counterValue{}, errors.New("no n")
	}
	return counterValue{v: float64(*v.N), ttl: time.Duration(v.TTLS) * time.Second}, nil
}

// Exhaustion is the value of an exhausted key (<client>.exhausted.<period
// id>), and what OnExhausted receives: a client's spend reached its
// budget for a period. Exactly one instance writes it per period (a
// create that fails when the key exists), unless a budget reset made the
// earlier one stale.
type Exhaustion struct {
	Version int    `json:"v"`
	Client  string `json:"client"`
	Plan    string `json:"plan"`
	// Period is day, week or month; PeriodID its window token
	// (d20250114, w2025W03, m202501).
	Period    string    `json:"period"`
	PeriodID  string    `json:"period_id"`
	SpendUSD  float64   `json:"spend_usd"`
	BudgetUSD float64   `json:"budget_usd"`
	Instance  string    `json:"instance"`
	At        time.Time `json:"at"`
	// Ends is when the period ends (UTC); the key expires a little later.
	Ends time.Time `json:"ends"`
	// ResetRevision is the bucket revision of the client's reset key that
	// the writer had applied (0: none). A reset with a higher revision
	// makes this record stale: every instance ignores it.
	ResetRevision uint64 `json:"reset_revision"`
}

// ResetRecord is the value of a reset key (<client>.reset): an operator
// reset the client's budgets. BaselineUSD holds, per period id, the
// fleet's spend when it was reset; every instance subtracts the baseline
// of the current periods from the client's spend.
type ResetRecord struct {
	Version     int                `json:"v"`
	Client      string             `json:"client"`
	By          string             `json:"by"`
	At          time.Time          `json:"at"`
	BaselineUSD map[string]float64 `json:"baseline_usd"`
}

// ttlOf rounds d up to whole seconds, at least one: the resolution of
// JetStream per-message TTLs.
func ttlOf(d time.Duration) time.Duration {
	if d <= time.Second {
		return time.Second
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

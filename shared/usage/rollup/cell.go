package rollup

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"switchyard.dev/shared/usage"
)

// Sketch settings: DDSketch with a relative accuracy of 1 % (a percentile
// read from a sketch is within 1 % of a value of that rank), bins of the
// lowest values collapsed beyond sketchMaxBins (2,048 bins at 1 % span a
// ratio of about 10^17 between the lowest and highest latency: never
// reached in practice, but it bounds a sketch's size).
const (
	RelativeAccuracy = 0.01
	sketchMaxBins    = 2048
)

var sketchMapping = func() mapping.IndexMapping {
	m, err := mapping.NewLogarithmicMapping(RelativeAccuracy)
	if err != nil {
		panic(err) // a constant accuracy in (0, 1)
	}
	return m
}()

func newSketch() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(sketchMapping, newStore(), newStore())
}

func newStore() store.Store { return store.NewCollapsingLowestDenseStore(sketchMaxBins) }

// Dims are the dimensions a cell is kept by: every group_by dimension of
// a usage report.
type Dims struct {
	Client     string `json:"client"`
	Plan       string `json:"plan"`
	ClientType string `json:"client_type"`
	Provider   string `json:"provider"`
	Model      string `json:"model"`
	KeyID      string `json:"key_id"`
	Endpoint   string `json:"endpoint"`
	Status     int    `json:"status"`
	Class      string `json:"class"`
}

// DimsOf returns the dimensions of r.
func DimsOf(r *usage.Record) Dims {
	return Dims{Client: r.ClientID, Plan: r.Plan, ClientType: r.ClientType, Provider: r.Provider, Model: r.Model,
		KeyID: r.KeyID, Endpoint: r.Endpoint, Status: r.Status, Class: r.Class}
}

// DimsOfFailed returns the dimensions of a's cell: r's, with the target
// (provider, model, key id) and the class of the failed attempt a of r.
func DimsOfFailed(r *usage.Record, a *usage.FailedAttempt) Dims {
	d := DimsOf(r)
	d.Provider, d.Model, d.KeyID, d.Class = a.Provider, a.Model, a.KeyID, a.Class
	return d
}

// Key is the key dimension of a report: <provider>/<key id>, the provider
// alone when it has no keys, "" when no attempt was made (key ids are
// unique within a provider only).
func (d *Dims) Key() string {
	if d.KeyID == "" {
		return d.Provider
	}
	return d.Provider + "/" + d.KeyID
}

// Dim returns the value of the report dimension name (client, plan,
// client_type, provider, model, key, endpoint, status, class); "" for an
// unknown name.
func (d *Dims) Dim(name string) string {
	switch name {
	case "client":
		return d.Client
	case "plan":
		return d.Plan
	case "client_type":
		return d.ClientType
	case "provider":
		return d.Provider
	case "model":
		return d.Model
	case "key":
		return d.Key()
	case "endpoint":
		return d.Endpoint
	case "status":
		return strconv.Itoa(d.Status)
	case "class":
		return d.Class
	}
	return ""
}

// Sums are what the records of a cell (or of a report's group) add up to.
type Sums struct {
	Requests int64 `json:"requests"`
	// Errors are the requests answered with a status of 400 or more.
	Errors int64        `json:"errors"`
	Tokens usage.Tokens `json:"tokens"`
	// CostUSD sums the known costs; CostUnknown counts the requests
	// without one (their cost is unknown, not 0).
	CostUSD           float64 `json:"cost_usd"`
	CostUnknown       int64   `json:"cost_unknown"`
	TokensEstimated   int64   `json:"tokens_estimated"`
	Streams           int64   `json:"streams"`
	StreamsIncomplete int64   `json:"streams_incomplete"`
	Cancelled         int64   `json:"cancelled"`
	// Attempts are the upstream attempts made on the cells' targets:
	// those that failed count in the cell of their own target and class
	// (AddFailed), the one that was answered in its request's (Add).
	// FailedAttempts are the failed ones, less those cancelled (the
	// caller's or the gateway's doing). Cells of records written before
	// the records listed their failed attempts count every attempt in the
	// request's cell, as failed or not by nothing; cells stored before
	// these fields read 0.
	Attempts       int64 `json:"attempts"`
	FailedAttempts int64 `json:"failed_attempts"`
	// CacheHits are the requests answered from the response cache, and
	// CacheSavedUSD what they saved (the known costs of the answers they
	// replayed); cells stored before these fields read 0.
	CacheHits     int64   `json:"cache_hits,omitempty"`
	CacheSavedUSD float64 `json:"cache_saved_usd,omitempty"`
	// Latency holds every request's latency (ms); TTFT the time to first
	// token (ms) of the streams that had one. nil when empty.
	Latency *ddsketch.DDSketch `json:"-"`
	TTFT    *ddsketch.DDSketch `json:"-"`
}

// Add counts r.
func (s *Sums) Add(r *usage.Record) {
	s.Requests++
	if r.Status >= 400 {
		s.Errors++
	}
	s.Tokens.Input += r.Tokens.Input
	s.Tokens.Output += r.Tokens.Output
	s.Tokens.CachedInput += r.Tokens.CachedInput
	s.Tokens.CacheWrite += r.Tokens.CacheWrite
	s.Tokens.Reasoning += r.Tokens.Reasoning
	if r.CostUSD != nil {
		s.CostUSD += *r.CostUSD
	} else {
		s.CostUnknown++
	}
	if r.TokensEstimated {
		s.TokensEstimated++
	}
	if r.Stream {
		s.Streams++
		if !r.StreamCompleted {
			s.StreamsIncomplete++
		}
		if r.TTFTMS > 0 {
			s.TTFT = addTo(s.TTFT, r.TTFTMS)
		}
	}
	if r.Cancelled {
		s.Cancelled++
	}
	if n := int64(r.Attempts - len(r.FailedAttempts)); n > 0 {
		s.Attempts += n
	}
	if r.Cache == "hit" {
		s.CacheHits++
		if r.CacheSavedUSD != nil {
			s.CacheSavedUSD += *r.CacheSavedUSD
		}
	}
	s.Latency = addTo(s.Latency, r.LatencyMS)
}

// AddFailed counts the failed attempt a (in the cell of DimsOfFailed).
func (s *Sums) AddFailed(a *usage.FailedAttempt) {
	s.Attempts++
	if !a.Cancelled {
		s.FailedAttempts++
	}
}

func addTo(sk *ddsketch.DDSketch, v float64) *ddsketch.DDSketch {
	if sk == nil {
		sk = newSketch()
	}
	if v < 0 {
		v = 0
	}
	_ = sk.Add(v) // refuses NaN and values beyond the mapping's range only
	return sk
}

// Merge adds o's sums to s. The sketches merge without loss: a percentile
// of the merged sketch is what one sketch of every record would give.
func (s *Sums) Merge(o *Sums) {
	s.Requests += o.Requests
	s.Errors += o.Errors
	s.Tokens.Input += o.Tokens.Input
	s.Tokens.Output += o.Tokens.Output
	s.Tokens.CachedInput += o.Tokens.CachedInput
	s.Tokens.CacheWrite += o.Tokens.CacheWrite
	s.Tokens.Reasoning += o.Tokens.Reasoning
	s.CostUSD += o.CostUSD
	s.CostUnknown += o.CostUnknown
	s.TokensEstimated += o.TokensEstimated
	s.Streams += o.Streams
	s.StreamsIncomplete += o.StreamsIncomplete
	s.Cancelled += o.Cancelled
	s.Attempts += o.Attempts
	s.FailedAttempts += o.FailedAttempts
	s.CacheHits += o.CacheHits
	s.CacheSavedUSD += o.CacheSavedUSD
	s.Latency = mergeInto(s.Latency, o.Latency)
	s.TTFT = mergeInto(s.TTFT, o.TTFT)
}

func mergeInto(dst, src *ddsketch.DDSketch) *ddsketch.DDSketch {
	if src == nil || src.IsEmpty() {
		return dst
	}
	if dst == nil {
		dst = newSketch()
	}
	_ = dst.MergeWith(src) // same mapping: never fails
	return dst
}

// Quantiles returns the values at qs of sk (nil: zeros).
func Quantiles(sk *ddsketch.DDSketch, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if sk == nil || sk.IsEmpty() {
		return out
	}
	vs, err := sk.GetValuesAtQuantiles(qs)
	if err != nil {
		return out
	}
	return vs
}

// Cell is one rollup cell: the sums of the records of one time bucket
// with the same Dims, and Through, the stream sequence of the last record
// folded into it. A record whose sequence is at most Through is in the
// cell already and is never folded into it again (see Folder).
type Cell struct {
	Dims
	Through uint64 `json:"through"`
	Sums
}

// cellJSON is Cell's stored form: the sketches in DDSketch's own binary
// encoding (base64 in JSON), without the index mapping (RelativeAccuracy).
type cellJSON struct {
	Dims
	Through uint64 `json:"through"`
	Sums
	Latency []byte `json:"latency_sketch,omitempty"`
	TTFT    []byte `json:"ttft_sketch,omitempty"`
}

// MarshalJSON writes the cell's stored form.
func (c *Cell) MarshalJSON() ([]byte, error) {
	j := cellJSON{Dims: c.Dims, Through: c.Through, Sums: c.Sums}
	if c.Latency != nil && !c.Latency.IsEmpty() {
		c.Latency.Encode(&j.Latency, true)
	}
	if c.TTFT != nil && !c.TTFT.IsEmpty() {
		c.TTFT.Encode(&j.TTFT, true)
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the cell's stored form.
func (c *Cell) UnmarshalJSON(b []byte) error {
	var j cellJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = Cell{Dims: j.Dims, Through: j.Through, Sums: j.Sums}
	var err error
	if c.Latency, err = decodeSketch(j.Latency); err != nil {
		return fmt.Errorf("latency_sketch: %w", err)
	}
	if c.TTFT, err = decodeSketch(j.TTFT); err != nil {
		return fmt.Errorf("ttft_sketch: %w", err)
	}
	return nil
}

func decodeSketch(b []byte) (*ddsketch.DDSketch, error) {
	if len(b) == 0 {
		return nil, nil
	}
	return ddsketch.DecodeDDSketch(b, newStore, sketchMapping)
}

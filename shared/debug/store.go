package debug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/hold"
)

// Subject is a bundle's subject:
// switchyard.debug.<outcome>.<provider or _>.<request id token>.
func Subject(outcome, provider, requestID string) string {
	if provider == "" {
		provider = "_"
	}
	return Prefix + "." + outcome + "." + provider + "." + hold.EncodeToken(requestID)
}

// ErrNotFound: no bundle of that request id in the stream (never written,
// not sampled, or older than the retention).
var ErrNotFound = errors.New("debug: no bundle for that request id")

// Get reads the bundle of a request id (a direct get of the last message on
// switchyard.debug.*.*.<token>: any instance answers, no consumer).
func Get(ctx context.Context, s jetstream.Stream, requestID string) (*Bundle, error) {
	if requestID == "" {
		return nil, ErrNotFound
	}
	m, err := s.GetLastMsgForSubject(ctx, Prefix+".*.*."+hold.EncodeToken(requestID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	var b Bundle
	if err := json.Unmarshal(m.Data, &b); err != nil {
		return nil, fmt.Errorf("debug: bundle %s: %w", requestID, err)
	}
	return &b, nil
}

// Filter selects bundles for List.
type Filter struct {
	Outcome  string    // ok, rejected, failed; "" all
	Provider string    // a provider name, "_" none; "" all
	Since    time.Time // zero: the last hour
	Limit    int       // at most this many, the newest; 0: 50
}

// MaxList bounds Filter.Limit.
const MaxList = 500

// Summary is one bundle as List returns it.
type Summary struct {
	RequestID string    `json:"request_id"`
	At        time.Time `json:"at"`
	Instance  string    `json:"instance"`
	Endpoint  string    `json:"endpoint"`
	Model     string    `json:"model"`
	Client    string    `json:"client,omitempty"`
	Provider  string    `json:"provider,omitempty"`
	Status    int       `json:"status"`
	Outcome   string    `json:"outcome"`
	ErrorCode string    `json:"error_code,omitempty"`
	Attempts  int       `json:"attempts"`
	LatencyMS float64   `json:"latency_ms"`
}

// SummaryOf summarises a bundle.
func SummaryOf(b *Bundle) Summary {
	return Summary{RequestID: b.RequestID, At: b.At, Instance: b.Instance, Endpoint: b.Endpoint, Model: b.Model,
		Client: b.Client, Provider: b.Provider, Status: b.Status, Outcome: b.Outcome, ErrorCode: b.ErrorCode,
		Attempts: len(b.Attempts), LatencyMS: b.LatencyMS}
}

// List returns the newest bundles matching f, newest first: an ordered
// consumer on the filter's subjects from f.Since, read to the stream's end
// (the server filters by outcome and provider).
func List(ctx context.Context, s jetstream.Stream, f Filter) ([]Summary, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, MaxList)
	since := f.Since
	if since.IsZero() {
		since = time.Now().Add(-time.Hour)
	}
	outcome, provider := f.Outcome, f.Provider
	if outcome == "" {
		outcome = "*"
	}
	if provider == "" {
		provider = "*"
	}
	if strings.ContainsAny(outcome+provider, ". >") {
		return nil, fmt.Errorf("debug: bad filter %q/%q", f.Outcome, f.Provider)
	}
	subject := Prefix + "." + outcome + "." + provider + ".*"
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := []Summary{}
	if info.State.Msgs == 0 {
		return out, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since})
	if err != nil {
		return nil, err
	}
	defer func() {
		// The ordered consumer is ephemeral; delete it now rather than
		// leave one per listing until the server's inactivity timeout.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = s.DeleteConsumer(dctx, c.CachedInfo().Name)
	}()
	ring := make([]Summary, 0, limit)
	last := info.State.LastSeq
	for {
		batch, err := c.FetchNoWait(256)
		if err != nil {
			return nil, err
		}
		n := 0
		var seq uint64
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err == nil {
				seq = md.Sequence.Stream
			}
			var b Bundle
			if json.Unmarshal(m.Data(), &b) != nil {
				continue
			}
			if len(ring) == limit {
				ring = ring[1:]
			}
			ring = append(ring, SummaryOf(&b))
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, err
		}
		if n == 0 || seq >= last {
			break
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	for i := len(ring) - 1; i >= 0; i-- {
		out = append(out, ring[i])
	}
	return out, nil
}

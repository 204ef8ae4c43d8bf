package admin

import (
	"bufio"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/routingdoc"
)

var eventKinds = []string{
	string(hold.EventHold), string(hold.EventRelease), string(hold.EventTrip),
	string(hold.EventProbe), string(hold.EventHealth), string(hold.EventCredential),
	string(hold.EventBudget), string(hold.EventGuardrail), routingdoc.EventKind,
}

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// eventFilter is what GET /admin/events was asked for.
type eventFilter struct {
	subjects []string
	deliver  jetstream.DeliverPolicy
	start    *time.Time
	seq      uint64
}

// parseEventFilter reads kind= and provider= (comma-separated lists),
// since= (a duration such as 10m, or an RFC 3339 time) and the resume
// point (Last-Event-ID header or ?last_event_id=, a stream sequence).
func parseEventFilter(c *fiber.Ctx, now time.Time) (eventFilter, error) {
	var f eventFilter
	kinds := splitList(c.Query("kind"))
	for _, k := range kinds {
		if !slices.Contains(eventKinds, k) {
			return f, fmt.Errorf("unknown kind %q (want %s)", k, strings.Join(eventKinds, ", "))
		}
	}
	provs := splitList(c.Query("provider"))
	for _, p := range provs {
		if !tokenRE.MatchString(p) {
			return f, fmt.Errorf("bad provider name %q", p)
		}
	}
	if len(kinds) == 0 {
		kinds = []string{"*"}
	}
	for _, k := range kinds {
		if len(provs) == 0 {
			f.subjects = append(f.subjects, bus.EventsPrefix+"."+k+".>")
			continue
		}
		for _, p := range provs {
			f.subjects = append(f.subjects, bus.EventsPrefix+"."+k+"."+p, bus.EventsPrefix+"."+k+"."+p+".>")
		}
	}
	if len(f.subjects) == 1 && f.subjects[0] == bus.EventsPrefix+".*.>" {
		f.subjects = []string{bus.EventsSubjects}
	}
	f.deliver = jetstream.DeliverNewPolicy
	if since := c.Query("since"); since != "" {
		var t time.Time
		if d, err := time.ParseDuration(since); err == nil && d > 0 {
			t = now.Add(-d)
		} else if t, err = time.Parse(time.RFC3339, since); err != nil {
			return f, fmt.Errorf("since: want a duration (10m) or an RFC 3339 time, got %q", since)
		}
		f.deliver, f.start = jetstream.DeliverByStartTimePolicy, &t
	}
	last := c.Get("Last-Event-ID")
	if last == "" {
		last = c.Query("last_event_id")
	}
	if last != "" {
		n, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			return f, fmt.Errorf("last event id: want a stream sequence, got %q", last)
		}
		f.deliver, f.start, f.seq = jetstream.DeliverByStartSequencePolicy, nil, n+1
	}
	return f, nil
}

// splitList splits a comma-separated filter value, dropping blanks and
// repeats: each value becomes consumer filter subjects, and JetStream
// refuses a consumer whose filter subjects overlap (provider=openai,openai).
func splitList(s string) []string {
	var out []string
	for _, p := range splitItems(s) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// splitItems splits a comma-separated value, dropping blanks, repeats
// kept (for a parameter that refuses them).
func splitItems(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// events: GET /admin/events: Server-Sent Events from the SWITCHYARD_EVENTS
// stream (an ordered consumer, so replay and live follow without a gap).
// Each event: "id: <stream sequence>", "event: <kind>", "data: <event JSON>".
func (s *Service) events(c *fiber.Ctx) error {
	f, err := parseEventFilter(c, time.Now())
	if err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	if !s.natsUp() {
		return natsDown(c)
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return natsDown(c)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		s.log.Warn("admin: events stream", "err", err)
		return natsDown(c)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: f.subjects, DeliverPolicy: f.deliver, OptStartTime: f.start, OptStartSeq: f.seq,
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return s.jetStreamFailed(c, err, "event filter", natsDown)
	}
	iter, err := cons.Messages()
	if err != nil {
		return s.jetStreamFailed(c, err, "event filter", natsDown)
	}
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no")
	s.streams.Add(1)
	s.met.streams.Inc()
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer s.streams.Done()
		defer s.met.streams.Dec()
		s.pump(w, iter)
	})
	return nil
}

// pump copies iter's messages to w until the client goes away, the
// service stops or the consumer fails.
func (s *Service) pump(w *bufio.Writer, iter jetstream.MessagesContext) {
	msgs := make(chan jetstream.Msg)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(msgs)
		for {
			m, err := iter.Next()
			if err != nil {
				return
			}
			select {
			case msgs <- m:
			case <-quit:
				return
			}
		}
	}()
	defer func() {
		close(quit)
		iter.Stop()
		<-done
	}()
	if _, err := fmt.Fprintf(w, "retry: 2000\n: connected\n\n"); err != nil || w.Flush() != nil {
		return
	}
	hb := time.NewTicker(s.hb)
	defer hb.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-hb.C:
			if _, err := w.WriteString(": ping\n\n"); err != nil || w.Flush() != nil {
				return
			}
		case m, ok := <-msgs:
			if !ok {
				_, _ = w.WriteString("event: error\ndata: {\"error\":{\"code\":\"nats_unavailable\",\"message\":\"event stream ended\"}}\n\n")
				_ = w.Flush()
				return
			}
			kind := ""
			if parts := strings.Split(m.Subject(), "."); len(parts) > 2 {
				kind = parts[2]
			}
			var seq uint64
			if md, err := m.Metadata(); err == nil {
				seq = md.Sequence.Stream
			}
			data := strings.ReplaceAll(string(m.Data()), "\n", " ")
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", seq, kind, data); err != nil || w.Flush() != nil {
				return
			}
		}
	}
}

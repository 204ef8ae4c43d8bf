package admin

// The fleet's headroom: the proxies' reports of what each key's provider
// last stated is left of its rate-limit windows (switchyard.headroom.>),
// kept in a book of their own and shown per key in the provider status.

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/headroom"
)

// followHeadroom applies the proxies' headroom reports until ctx ends.
func (s *Service) followHeadroom(ctx context.Context) {
	sub, err := s.nc.Subscribe(headroom.Prefix+".>", func(m *nats.Msg) {
		var rep headroom.Report
		if json.Unmarshal(m.Data, &rep) == nil {
			s.room.Apply(&rep, s.member.Instance)
		}
	})
	if err != nil {
		s.log.Warn("admin: headroom reports not received: the provider status shows no headroom", "err", err)
		return
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
}

// headroomByKey is the book's windows by provider and key, as of now.
func (s *Service) headroomByKey(now time.Time) map[[2]string][]adminapi.Headroom {
	out := map[[2]string][]adminapi.Headroom{}
	t := now.UnixNano()
	for _, e := range s.room.Entries() {
		id := [2]string{e.Provider, e.Key}
		for _, w := range e.Windows {
			h := adminapi.Headroom{Model: e.Model, Kind: w.Kind.String(), Limit: w.Limit, Remaining: w.Left(t),
				Reset: time.Unix(0, w.Reset).UTC(), At: time.Unix(0, w.At).UTC()}
			if share, ok := w.Ratio(t); ok {
				h.Share = &share
			}
			out[id] = append(out[id], h)
		}
	}
	return out
}

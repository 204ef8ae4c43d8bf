package admin

import (
	"context"

	"switchyard.dev/shared/credentials"
	"switchyard.dev/shared/kvwatch"
)

// watchHealth feeds the health view from switchyard_health once the
// buckets are bound, until ctx ends (the watcher restarts itself).
func (s *Service) watchHealth(ctx context.Context) {
	select {
	case <-s.member.Bound():
	case <-ctx.Done():
		return
	}
	_ = s.health.Run(ctx, s.member.Resources().Health, s.nc, s.log.With("component", "health"))
}

// watchRotations keeps the last rotation of each key (fingerprint and
// time, never the secret: records are not decrypted here) for the status,
// including rotations made by other admin instances, once the buckets are
// bound and until ctx ends. The kvwatch watcher restarts itself on
// reconnects, leader elections and stalls, resuming where it was.
func (s *Service) watchRotations(ctx context.Context) {
	select {
	case <-s.member.Bound():
	case <-ctx.Done():
		return
	}
	o := kvwatch.Options{KV: s.member.Resources().Credentials, Conn: s.nc, Log: s.log.With("component", "rotations")}
	_ = kvwatch.Run(ctx, o, func(ev kvwatch.Event) {
		if ev.Op != kvwatch.OpPut {
			return
		}
		if r, err := credentials.Decode(ev.Key, ev.Value); err == nil {
			s.noteRotation(r, ev.Revision)
		}
	})
}

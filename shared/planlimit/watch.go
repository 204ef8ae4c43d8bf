package planlimit

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"switchyard.dev/shared/kvwatch"
)

// apply takes one change of the bucket: another instance's totals, an
// exhausted key, a reset key. This instance's own counter keys are
// skipped (its memory is ahead of them), except in the first load, where
// they are those of a predecessor with the same instance id and are added
// to the local counts.
func (l *Limiter) apply(ev kvwatch.Event) {
	if ev.Op == kvwatch.OpLoaded {
		l.loaded.Store(true)
		l.poke()
		return
	}
	pk, ok := parseKey(ev.Key)
	if !ok {
		l.log.Debug("planlimit: skipping a key of another shape", "key", ev.Key)
		return
	}
	now := l.now()
	p := l.periodsAt(now)
	m, _ := minuteOf(now)
	c := l.client(pk.client)
	c.mu.Lock()
	c.roll(m, p)
	var won *Exhaustion
	err := l.applyTo(c, pk, ev, m, p, &won)
	claim := err == nil && pk.typ == keyCount && pk.w.k >= kindDay && c.needsClaim(p)
	c.mu.Unlock()
	if err != nil {
		l.log.Warn("planlimit: skipping a value", "key", ev.Key, "revision", ev.Revision, "err", err)
	}
	if claim {
		l.poke()
	}
	if won != nil {
		l.exhausted(*won)
	}
}

// applyTo applies ev to c; *won is set when ev is the exhausted key this
// instance created and it is in effect.
func (l *Limiter) applyTo(c *client, pk parsedKey, ev kvwatch.Event, m int64, p *periods, won **Exhaustion) error {
	del := ev.Op == kvwatch.OpDelete
	switch pk.typ {
	case keyCount:
		if pk.instance == l.inst {
			if ev.Initial && !del {
				return c.seed(pk.w, ev.Value)
			}
			return nil
		}
		if del {
			if pk.w.k == kindInflight {
				delete(c.heard, pk.instance)
			}
			c.setOther(pk.w, pk.instance, 0, true)
			return nil
		}
		if past(pk.w, m, p) {
			return nil
		}
		v, err := decodeCount(pk.w.k, ev.Value)
		if err != nil {
			return err
		}
		if pk.w.k == kindInflight {
			if c.heard == nil {
				c.heard = make(map[string]heardAt)
			}
			c.heard[pk.instance] = heardAt{at: time.Now(), ttl: cmp.Or(v.ttl, l.inflightTTL)}
		}
		c.setOther(pk.w, pk.instance, v.v, false)

	case keyExhausted:
		if del {
			if mk, ok := c.markers[pk.w]; ok && mk.rev < ev.Revision {
				delete(c.markers, pk.w)
			}
			return nil
		}
		if past(pk.w, m, p) {
			return nil
		}
		var exh Exhaustion
		if err := json.Unmarshal(ev.Value, &exh); err != nil {
			return err
		}
		if exh.Version != SchemaVersion {
			return fmt.Errorf("schema version %d, want %d", exh.Version, SchemaVersion)
		}
		if c.markers == nil {
			c.markers = make(map[win]marker)
		}
		c.markers[pk.w] = marker{rev: ev.Revision, exh: exh}
		if rev, ok := c.won[pk.w]; ok && rev == ev.Revision {
			delete(c.won, pk.w)
			if c.markerValid(pk.w) {
				*won = &exh
			}
		}

	case keyReset:
		if del {
			// expired after its periods ended: nothing left to subtract
			c.reset, c.baseline = nil, nil
			c.ov.valid = false
			return nil
		}
		var rec ResetRecord
		if err := json.Unmarshal(ev.Value, &rec); err != nil {
			return err
		}
		if rec.Version != SchemaVersion {
			return fmt.Errorf("schema version %d, want %d", rec.Version, SchemaVersion)
		}
		c.applyReset(ev.Revision, &rec)
	}
	return nil
}

// seed adds a predecessor's total (same instance id) to the local count
// of the same window; an in-flight count left behind is overwritten with
// this process's own at the next report.
func (c *client) seed(w win, data []byte) error {
	cv, err := decodeCount(w.k, data)
	if err != nil {
		return err
	}
	v := cv.v
	switch w.k {
	case kindReq, kindTok:
		for _, mc := range [2]*minuteCount{&c.prev, &c.cur} {
			if mc.idx != w.id {
				continue
			}
			if w.k == kindReq {
				mc.req += int64(v)
			} else {
				mc.tok += int64(v)
			}
		}
	case kindInflight:
		c.repInflight = int64(v)
	default:
		if s := &c.spend[w.k-kindDay]; s.id == w.id {
			s.usd += v
		}
	}
	return nil
}

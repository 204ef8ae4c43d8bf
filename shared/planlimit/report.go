package planlimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/kvwatch"
)

// maxPending bounds the asynchronous publishes awaited at once (nats.go
// stalls beyond 4000).
const maxPending = 1000

// Run reports this instance's consumption every interval and follows the
// other instances' reports, exhausted keys and resets, until ctx ends;
// then it makes a final report, bounded by Options.ShutdownTimeout, and
// returns nil. Before Bind it only waits (Admit counts locally all the
// while). Reports start once the watcher delivered the bucket's content.
func (l *Limiter) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("planlimit: Run called twice")
	}
	select {
	case <-l.b.Bound():
	case <-ctx.Done():
		return nil
	}
	b := l.b.Load()
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		o := kvwatch.Options{KV: b.kv, Conn: l.nc, Log: l.log, MarkerTTL: l.markerTTL}
		if err := kvwatch.Run(wctx, o, l.apply); err != nil {
			l.log.Error("planlimit: limits watcher", "err", err)
		}
	})
	defer func() {
		stop()
		wg.Wait()
		b.pub.CleanupPublisher()
	}()
	t := time.NewTicker(l.interval)
	defer t.Stop()
	var r reporter
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.shutdownTimeout)
			r.report(fctx, l, b)
			cancel()
			return nil
		case <-t.C:
			r.report(ctx, l, b)
		case <-l.wake:
			r.report(ctx, l, b)
		}
	}
}

// reporter is the state of the report loop.
type reporter struct {
	ws      []write
	claims  []claimReq
	failing bool
}

// write is one counter key to write.
type write struct {
	c   *client
	w   win
	n   int64
	usd float64
	ttl time.Duration
}

// claimReq is an exhausted key to create.
type claimReq struct {
	c        *client
	i        int
	w        win
	exh      Exhaustion
	staleRev uint64 // a stale exhausted key to replace (0: none known)
}

// report writes the counters that changed and creates the exhausted keys
// due.
func (r *reporter) report(ctx context.Context, l *Limiter, b *binding) {
	now := l.now()
	p := l.periodsAt(now)
	m, _ := minuteOf(now)
	wall := time.Now()
	live := l.loaded.Load() && l.nc.IsConnected()
	r.ws, r.claims = r.ws[:0], r.claims[:0]
	for _, c := range *l.clients.Load() {
		c.mu.Lock()
		c.roll(m, p)
		c.prune(m, p)
		c.forgetSilent(wall, l.interval)
		if live && c.reportable {
			r.collect(l, c, now, p, wall)
			r.collectClaims(l, c, now, p)
		}
		c.mu.Unlock()
	}
	if !live {
		return
	}
	failed, err := 0, error(nil)
	for start := 0; start < len(r.ws); start += maxPending {
		f, e := l.publish(ctx, b, r.ws[start:min(start+maxPending, len(r.ws))], wall)
		failed += f
		if err == nil {
			err = e
		}
	}
	switch {
	case failed > 0 && !r.failing:
		l.log.Warn("planlimit: report incomplete; retrying every interval", "failed", failed, "of", len(r.ws), "err", err)
		r.failing = true
	case failed == 0 && r.failing && len(r.ws) > 0:
		l.log.Info("planlimit: reports written again")
		r.failing = false
	}
	for _, x := range r.claims {
		l.claim(ctx, b, x)
	}
	clear(r.ws)
	clear(r.claims)
}

// collect adds c's counters that differ from what was last written, and
// its in-flight key when it needs renewing.
func (r *reporter) collect(l *Limiter, c *client, now time.Time, p *periods, wall time.Time) {
	for _, mc := range [2]*minuteCount{&c.prev, &c.cur} {
		if mc.req != mc.repReq {
			r.ws = append(r.ws, write{c: c, w: win{kindReq, mc.idx}, n: mc.req, ttl: MinuteTTL})
		}
		if mc.tok != mc.repTok {
			r.ws = append(r.ws, write{c: c, w: win{kindTok, mc.idx}, n: mc.tok, ttl: MinuteTTL})
		}
	}
	if c.inflight != c.repInflight || c.inflight > 0 && wall.Sub(c.inflightAt) >= l.inflightTTL/2 {
		r.ws = append(r.ws, write{c: c, w: win{k: kindInflight}, n: c.inflight, ttl: l.inflightTTL})
	}
	for i := range c.spend {
		if s := &c.spend[i]; s.usd != s.rep {
			r.ws = append(r.ws, write{c: c, w: win{kindDay + kind(i), s.id}, usd: s.usd,
				ttl: ttlOf(p.ends[i].Sub(now) + PeriodMargin)})
		}
	}
}

// collectClaims adds the exhausted keys c needs: a period's spend reached
// its budget, no valid key is known and this instance has not tried yet.
func (r *reporter) collectClaims(l *Limiter, c *client, now time.Time, p *periods) {
	if c.lim == nil {
		return
	}
	for i := range 3 {
		budget := c.lim.budget(i)
		if budget <= 0 || c.claimed(i, p, budget) || c.exhausted(i, p) {
			continue
		}
		spend := c.spendOf(i, p)
		if spend < budget-epsilon {
			continue
		}
		w := win{kindDay + kind(i), p.ids[i]}
		c.claim[i], c.claimAt[i] = p.ids[i], budget
		x := claimReq{c: c, i: i, w: w, exh: Exhaustion{
			Version: SchemaVersion, Client: c.id, Plan: c.lim.Plan,
			Period: periodNames[i], PeriodID: periodToken(w.k, w.id),
			SpendUSD: spend, BudgetUSD: budget, Instance: l.inst,
			At: now.UTC(), Ends: p.ends[i], ResetRevision: c.resetRev,
		}}
		if mk, ok := c.markers[w]; ok {
			x.staleRev = mk.rev
		}
		r.claims = append(r.claims, x)
	}
}

// publish writes ws asynchronously and marks what was acknowledged as
// reported; it returns how many writes failed.
func (l *Limiter) publish(ctx context.Context, b *binding, ws []write, wall time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opTimeout)
	defer cancel()
	futs := make([]jetstream.PubAckFuture, len(ws))
	failed := 0
	var firstErr error
	fail := func(err error) {
		failed++
		if firstErr == nil {
			firstErr = err
		}
	}
	for i, w := range ws {
		msg := &nats.Msg{Subject: b.prefix + countKey(w.c.id, w.w, l.inst), Data: encodeCount(w.w.k, w.n, w.usd, w.ttl)}
		f, err := b.pub.PublishMsgAsync(msg, jetstream.WithMsgTTL(w.ttl))
		if err != nil {
			fail(err)
			continue
		}
		futs[i] = f
	}
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			l.reported(ws[i], wall)
		case err := <-f.Err():
			fail(err)
		case <-ctx.Done():
			fail(ctx.Err())
		}
	}
	return failed, firstErr
}

// reported records that w is what the bucket holds now.
func (l *Limiter) reported(w write, wall time.Time) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch w.w.k {
	case kindReq, kindTok:
		for _, mc := range [2]*minuteCount{&c.prev, &c.cur} {
			if mc.idx != w.w.id {
				continue
			}
			if w.w.k == kindReq {
				mc.repReq = w.n
			} else {
				mc.repTok = w.n
			}
		}
	case kindInflight:
		c.repInflight, c.inflightAt = w.n, wall
	default:
		if s := &c.spend[w.w.k-kindDay]; s.id == w.w.id {
			s.rep = w.usd
		}
	}
}

// claim creates an exhausted key. Exactly one instance succeeds; it calls
// OnExhausted once its watcher applies the key (see exhaustedApplied).
func (l *Limiter) claim(ctx context.Context, b *binding, x claimReq) {
	c := x.c
	// Still wanted? A reset or the winner's key may have arrived since
	// the claim was collected.
	c.mu.Lock()
	still := c.claim[x.i] == x.w.id && c.resetRev == x.exh.ResetRevision && !c.markerValid(x.w)
	if mk, ok := c.markers[x.w]; ok {
		x.staleRev = mk.rev
	}
	c.mu.Unlock()
	if !still {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, l.opTimeout)
	defer cancel()
	key := exhaustedKey(c.id, x.w)
	data, err := json.Marshal(x.exh)
	if err != nil {
		l.log.Error("planlimit: encode exhausted key", "key", key, "err", err)
		return
	}
	ttl := ttlOf(x.exh.Ends.Sub(x.exh.At) + PeriodMargin)
	var rev uint64
	if x.staleRev == 0 {
		rev, err = b.kv.Create(ctx, key, data, jetstream.KeyTTL(ttl))
	} else {
		// A stale key (written before the last reset): replace it, still
		// one writer only.
		var ack *jetstream.PubAck
		ack, err = b.pub.PublishMsg(ctx, &nats.Msg{Subject: b.prefix + key, Data: data},
			jetstream.WithExpectLastSequencePerSubject(x.staleRev), jetstream.WithMsgTTL(ttl))
		if err == nil {
			rev = ack.Sequence
		}
	}
	if err != nil {
		c.mu.Lock()
		if c.claim[x.i] == x.w.id {
			c.claim[x.i] = 0 // the watcher brings the winner's key; until then, try again
		}
		c.mu.Unlock()
		if !lostRace(err) {
			l.log.Warn("planlimit: record budget exhaustion", "key", key, "err", err)
		}
		return
	}
	// The key is ours. It is in effect unless a reset came before it in
	// the bucket (this instance's view at collection may have been behind):
	// only the watcher, which applies revisions in order, can tell.
	c.mu.Lock()
	var fire bool
	if mk, ok := c.markers[x.w]; ok && mk.rev == rev {
		fire = x.exh.ResetRevision >= c.resetRev // the watcher was first
	} else {
		if c.won == nil {
			c.won = make(map[win]uint64)
		}
		c.won[x.w] = rev
	}
	c.mu.Unlock()
	if fire {
		l.exhausted(x.exh)
	}
}

// exhausted reports a budget exhaustion this instance recorded.
func (l *Limiter) exhausted(e Exhaustion) {
	l.log.Info("planlimit: budget exhausted", "client", e.Client, "plan", e.Plan, "period", e.PeriodID,
		"spend_usd", e.SpendUSD, "budget_usd", e.BudgetUSD)
	if l.onExhausted != nil {
		l.onExhausted(e)
	}
}

// lostRace reports whether err says another writer got there first.
func lostRace(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// ResetBudget resets client's budgets for the current day, week and
// month: it writes the client's reset key with the fleet's spend of each
// period as its baseline and who reset it (by), and deletes the
// exhausted keys of those periods. Every instance subtracts the baseline
// as soon as its watcher applies the key (within milliseconds) and
// ignores exhausted keys written before it. It fails with ErrUnbound
// before Bind, and with ErrNotLoaded until the watcher has loaded the
// bucket (the baseline is the fleet's spend as this instance knows it:
// before the load it would be 0 and reset nothing).
func (l *Limiter) ResetBudget(ctx context.Context, clientID, by string) error {
	if !validID(clientID) {
		return fmt.Errorf("planlimit: reset budget: invalid client id %q", clientID)
	}
	if by == "" {
		return fmt.Errorf("planlimit: reset budget of %s: no operator (by)", clientID)
	}
	b := l.b.Load()
	if b == nil {
		return fmt.Errorf("%w: reset budget of %s", ErrUnbound, clientID)
	}
	if !l.loaded.Load() {
		return fmt.Errorf("%w: reset budget of %s", ErrNotLoaded, clientID)
	}
	now := l.now()
	p := l.periodsAt(now)
	m, _ := minuteOf(now)
	c := l.client(clientID)
	rec := ResetRecord{Version: SchemaVersion, Client: clientID, By: by, At: now.UTC(),
		BaselineUSD: make(map[string]float64, 3)}
	type stale struct {
		w   win
		rev uint64
	}
	var markers []stale
	c.mu.Lock()
	c.roll(m, p)
	for i := range 3 {
		w := win{kindDay + kind(i), p.ids[i]}
		rec.BaselineUSD[periodToken(w.k, w.id)] = c.rawSpend(i, p)
		if mk, ok := c.markers[w]; ok {
			markers = append(markers, stale{w, mk.rev})
		}
	}
	c.mu.Unlock()
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("planlimit: reset budget of %s: %w", clientID, err)
	}
	last := p.ends[0]
	for _, e := range p.ends[1:] {
		if e.After(last) {
			last = e
		}
	}
	octx, cancel := context.WithTimeout(ctx, l.opTimeout)
	defer cancel()
	ack, err := b.pub.PublishMsg(octx, &nats.Msg{Subject: b.prefix + resetKey(clientID), Data: data},
		jetstream.WithMsgTTL(ttlOf(last.Sub(now)+PeriodMargin)))
	if err != nil {
		return fmt.Errorf("planlimit: reset budget of %s: write %s: %w", clientID, resetKey(clientID), err)
	}
	c.mu.Lock()
	c.applyReset(ack.Sequence, &rec)
	c.mu.Unlock()
	for _, s := range markers {
		key := exhaustedKey(clientID, s.w)
		if err := b.kv.Delete(octx, key, jetstream.LastRevision(s.rev)); err != nil && !lostRace(err) {
			// Harmless: the key is stale for every instance anyway.
			l.log.Warn("planlimit: reset budget: delete exhausted key", "key", key, "err", err)
		}
	}
	l.log.Info("planlimit: budget reset", "client", clientID, "by", by, "baseline_usd", rec.BaselineUSD)
	return nil
}

// applyReset applies a reset key written at revision rev.
func (c *client) applyReset(rev uint64, rec *ResetRecord) {
	if rev <= c.resetRev {
		return
	}
	c.resetRev, c.reset = rev, rec
	c.ov.valid = false
	c.baseline = make(map[win]float64, len(rec.BaselineUSD))
	for id, v := range rec.BaselineUSD {
		if k, n, ok := parsePeriod(id); ok {
			c.baseline[win{k, n}] = v
		}
	}
	c.claim = [3]int64{}
}

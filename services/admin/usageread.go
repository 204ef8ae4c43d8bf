package admin

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/usage/rollup"
)

// usageMaxFilters: a resolution with more tiles in one report is read
// with one filter for all its values (those outside the range are
// dropped), rather than one filter subject per tile.
const usageMaxFilters = 256

// planTiles chooses the rollup buckets that tile [from, to) at now: at
// each point the coarsest resolution (at most the interval, when there is
// one) whose bucket starts there, ends by to and is still kept. from is
// moved down to the finest resolution kept there; where no resolution is
// kept any more the tiles start later, at coveredFrom.
func planTiles(from, to, now time.Time, res []rollup.Resolution, interval time.Duration) (tiles []rollup.Tile, start, coveredFrom time.Time) {
	allowed := 0 // resolutions res[:allowed] may be used
	for allowed < len(res) && (interval == 0 || res[allowed].Width <= interval) {
		allowed++
	}
	kept := func(i int, t time.Time) bool { return res[i].Kept(res[i].Start(t), now) }
	t := from
	coveredFrom = from
	found := false
	for i := range allowed {
		if kept(i, t) {
			t, found = res[i].Start(t), true
			break
		}
	}
	if !found {
		// past every retention: start where the coarsest allowed
		// resolution is still kept
		c := res[allowed-1]
		t = c.Start(now.Add(-c.Keep - c.Width)).Add(c.Width)
		coveredFrom = t
	}
	start = from
	if t.Before(from) {
		start, coveredFrom = t, t
	}
	for t.Before(to) {
		chosen := -1
		for i := allowed - 1; i >= 0; i-- {
			w := res[i]
			if w.Start(t).Equal(t) && !t.Add(w.Width).After(to) && kept(i, t) {
				chosen = i
				break
			}
		}
		if chosen < 0 { // the end of the range, inside a bucket of the finest kept resolution
			for i := range allowed {
				if kept(i, t) {
					chosen = i
					break
				}
			}
			if chosen < 0 {
				chosen = 0
			}
		}
		tiles = append(tiles, rollup.Tile{Res: chosen, Start: res[chosen].Start(t)})
		t = res[chosen].Start(t).Add(res[chosen].Width)
	}
	return tiles, start, coveredFrom
}

// read answers q: the rollup cells of the tiles planTiles chooses, then
// the records of the stream after the recorder's checkpoint (by an
// ordered consumer, from the checkpoint or, when later, from q.from less
// usageStartSlack, until the stream's last message as of the start, a
// message stored after q.to plus usageStopSlack, maxScan records, or the
// end of ctx). A record after the checkpoint that its cell holds already
// (the recorder flushed it, but not yet its checkpoint: the cell's through
// is at or after the record's sequence) is counted once, from the cell.
func (u *usageReader) read(ctx context.Context, stream jetstream.Stream, st *rollup.Store, q usageQuery) (*adminapi.UsageReport, error) {
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	// the checkpoint first: every value read after it holds at least
	// what it says
	ck, _, err := st.Checkpoint(octx)
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(octx)
	if err != nil {
		return nil, fmt.Errorf("usage stream info: %w", err)
	}
	tiles, start, covered := planTiles(q.from, q.to, time.Now(), st.Res, q.interval)
	q.from = start
	sum := newUsageSum(q)
	sum.coveredFrom = covered

	// records not in the rollups
	switch {
	case ck.Seq == 0 && info.State.FirstSeq > 1 && info.State.Msgs > 0:
		sum.coveredFrom = maxTime(sum.coveredFrom, info.State.FirstTime)
	case ck.StartSeq > 1:
		sum.coveredFrom = maxTime(sum.coveredFrom, ck.StartAt)
	}
	for _, g := range ck.Lost {
		if g.To.After(q.from) && g.From.Before(q.to) {
			sum.unread += int64(g.Messages)
		}
	}
	if ck.Seq > 0 && info.State.FirstSeq > ck.Seq+1 && ck.StoredAt.Before(q.to.Add(usageStopSlack)) {
		// discarded before the recorder read them (it will count them lost)
		sum.unread += int64(info.State.FirstSeq - ck.Seq - 1)
	}

	// the rollups; cells holding records after the checkpoint are indexed,
	// so that the stream's copy of those records is not counted again
	ahead := map[int]map[rollup.Dims]uint64{}
	err = readTiles(octx, st, tiles, func(i int, v *rollup.Value) {
		for _, c := range v.Cells {
			sum.addCell(c, v.Start)
			if c.Through > ck.Seq {
				if ahead[i] == nil {
					ahead[i] = map[rollup.Dims]uint64{}
				}
				ahead[i][c.Dims] = c.Through
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if err := u.readTail(ctx, stream, info, ck, q, sum, func(seq uint64) bool {
		i := tileOf(tiles, st.Res, sum.rec.At)
		if i < 0 || ahead[i] == nil {
			return false
		}
		return ahead[i][rollup.DimsOf(&sum.rec)] >= seq
	}); err != nil {
		return nil, err
	}
	return sum.answer(u.maxScan), nil
}

// readTiles reads the values of tiles, one filter per tile, or one per
// resolution for a resolution with more than usageMaxFilters tiles.
func readTiles(ctx context.Context, st *rollup.Store, tiles []rollup.Tile, visit func(int, *rollup.Value)) error {
	perRes := map[int]int{}
	for _, t := range tiles {
		perRes[t.Res]++
	}
	index := map[rollup.Tile]int{}
	var few, many []rollup.Tile
	for i, t := range tiles {
		index[rollup.Tile{Res: t.Res, Start: t.Start.UTC()}] = i
		if perRes[t.Res] > usageMaxFilters {
			continue
		}
		few = append(few, t)
	}
	for r, n := range perRes {
		if n > usageMaxFilters {
			many = append(many, rollup.Tile{Res: r})
		}
	}
	at := func(v *rollup.Value) int {
		for r, res := range st.Res {
			if res.Name == v.Resolution {
				if i, ok := index[rollup.Tile{Res: r, Start: v.Start.UTC()}]; ok {
					return i
				}
			}
		}
		return -1
	}
	if err := st.Read(ctx, few, func(_ int, v *rollup.Value) {
		if i := at(v); i >= 0 {
			visit(i, v)
		}
	}); err != nil {
		return err
	}
	for _, m := range many {
		if err := st.ReadAll(ctx, m.Res, func(v *rollup.Value) {
			if i := at(v); i >= 0 {
				visit(i, v)
			}
		}); err != nil {
			return err
		}
	}
	return nil
}

// tileOf is the index of the tile holding t, -1 when none does.
func tileOf(tiles []rollup.Tile, res []rollup.Resolution, t time.Time) int {
	i := sort.Search(len(tiles), func(i int) bool { return tiles[i].Start.After(t) }) - 1
	if i < 0 || !t.Before(tiles[i].Start.Add(res[tiles[i].Res].Width)) {
		return -1
	}
	return i
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// readTail sums the stream's messages after the checkpoint ck; folded
// reports a record (in sum.rec) of message seq that the rollups hold.
func (u *usageReader) readTail(ctx context.Context, stream jetstream.Stream, info *jetstream.StreamInfo, ck rollup.Checkpoint,
	q usageQuery, sum *usageSum, folded func(seq uint64) bool) error {
	last := info.State.LastSeq
	if info.State.Msgs == 0 || last <= ck.Seq || info.State.LastTime.Before(q.from.Add(-usageStartSlack)) {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: q.subjects, InactiveThreshold: 30 * time.Second}
	if startAt := q.from.Add(-usageStartSlack); ck.Seq == 0 || ck.StoredAt.Before(startAt) {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &startAt
	} else {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, ck.Seq+1
	}
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	cons, err := stream.OrderedConsumer(octx, cfg)
	if err != nil {
		return fmt.Errorf("usage consumer: %w", err)
	}
	defer func() {
		// the consumer is of this report only: gone with it, rather than
		// left to its inactive threshold
		if ci := cons.CachedInfo(); ci != nil {
			dctx, dcancel := context.WithTimeout(context.Background(), opTimeout)
			_ = stream.DeleteConsumer(dctx, ci.Name)
			dcancel()
		}
	}()
	if ci := cons.CachedInfo(); ci != nil && ci.NumPending == 0 {
		return nil // no record (of the filter) stored since the start
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return fmt.Errorf("usage consumer: %w", err)
	}
	defer iter.Stop()
	stopAt := q.to.Add(usageStopSlack)
	for {
		m, err := iter.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				sum.truncatedBy = "deadline"
				return nil
			}
			return fmt.Errorf("usage consumer: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("usage record metadata: %w", err)
		}
		seq := md.Sequence.Stream
		if seq > last || md.Timestamp.After(stopAt) {
			return nil
		}
		if sum.scanned >= int64(u.maxScan) {
			sum.truncatedBy = "max_scanned"
			sum.unread += int64(md.NumPending) + 1
			return nil
		}
		if seq > ck.Seq {
			// a message holds the records of one batch of a proxy that
			// share a subject, one JSON record per line
			for line := range bytes.Lines(m.Data()) {
				if sum.decode(bytes.TrimSuffix(line, []byte("\n"))) && !folded(seq) {
					sum.add()
				}
			}
		}
		if seq == last || md.NumPending == 0 {
			return nil
		}
	}
}

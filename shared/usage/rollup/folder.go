package rollup

import (
	"context"
	"time"

	"switchyard.dev/shared/usage"
)

// Folder folds usage records into the rollups of a Store, exactly once
// per record, and writes what changed with Flush.
//
// Exactly once rests on each cell's Through, the stream sequence of the
// last message folded into it, stored with the cell. The records are
// folded in stream order; a message whose sequence is at most a cell's
// Through is already in that cell (the whole message: a message is folded
// between two flushes) and is skipped for it. So a recorder that restarts
// from a checkpoint older than what it flushed (it died between writing
// values and writing the checkpoint, or in the middle of a flush) folds
// again exactly the records that some values do not hold yet, whichever
// values were written. Cells never move between values, which is what
// makes the per-cell test enough.
//
// Every value is written with compare-and-set against the revision it was
// read at: two recorders that both believe they hold the lease cannot
// both write one value; the loser gets ErrConflict and must Reset and
// start again from the checkpoint.
//
// A Folder is used by one goroutine.
type Folder struct {
	st     *Store
	groups map[groupKey]*group
}

type groupKey struct {
	res      int
	start    int64
	provider string
}

// group is one time bucket of one resolution for one provider: its
// stored parts and an index of their cells.
type group struct {
	res     int
	start   time.Time
	parts   []*part
	cells   map[Dims]*cellRef
	touched bool
}

type part struct {
	v     Value
	rev   uint64 // 0: not stored yet
	dirty bool
}

type cellRef struct {
	cell *Cell
	part *part
	// folding is the message being folded into the cell now: its other
	// records go in too, though Through already names it.
	folding uint64
}

// NewFolder returns an empty folder over st.
func NewFolder(st *Store) *Folder { return &Folder{st: st, groups: map[groupKey]*group{}} }

// Reset forgets everything not flushed and every value read (after
// ErrConflict, or before starting again from the checkpoint).
func (f *Folder) Reset() { f.groups = map[groupKey]*group{} }

// Add folds the records of stream message seq into every resolution whose
// bucket for them is still kept: each record into the cell of its
// dimensions, and each of its failed attempts into the cell of its
// target and class (which may belong to another provider's values). It
// reads the values it needs first (once, then keeps them).
func (f *Folder) Add(ctx context.Context, seq uint64, recs []usage.Record) error {
	now := f.st.now()
	for i := range recs {
		r := &recs[i]
		for ri, res := range f.st.Res {
			start := res.Start(r.At)
			if !res.Kept(start, now) {
				continue
			}
			ref, err := f.cell(ctx, ri, start, DimsOf(r), seq)
			if err != nil {
				return err
			}
			if ref != nil {
				ref.cell.Add(r)
			}
			for j := range r.FailedAttempts {
				a := &r.FailedAttempts[j]
				if ref, err = f.cell(ctx, ri, start, DimsOfFailed(r, a), seq); err != nil {
					return err
				}
				if ref != nil {
					ref.cell.AddFailed(a)
				}
			}
		}
	}
	return nil
}

// cell returns the cell of d in the bucket of resolution ri starting at
// start, marked as folding message seq; nil when the message is in it
// already.
func (f *Folder) cell(ctx context.Context, ri int, start time.Time, d Dims, seq uint64) (*cellRef, error) {
	g, err := f.group(ctx, ri, start, d.Provider)
	if err != nil {
		return nil, err
	}
	g.touched = true
	ref := g.cells[d]
	switch {
	case ref == nil:
		ref = g.newCell(d)
	case ref.cell.Through >= seq && ref.folding != seq:
		return nil, nil // folded before
	}
	ref.folding = seq
	ref.cell.Through = seq
	ref.part.v.Through = max(ref.part.v.Through, seq)
	ref.part.dirty = true
	return ref, nil
}

func (f *Folder) group(ctx context.Context, ri int, start time.Time, provider string) (*group, error) {
	k := groupKey{res: ri, start: start.Unix(), provider: provider}
	if g := f.groups[k]; g != nil {
		return g, nil
	}
	parts, err := f.st.load(ctx, f.st.Res[ri], start, provider)
	if err != nil {
		return nil, err
	}
	g := &group{res: ri, start: start, parts: parts, cells: map[Dims]*cellRef{}}
	for _, p := range parts {
		for _, c := range p.v.Cells {
			g.cells[c.Dims] = &cellRef{cell: c, part: p}
		}
	}
	f.groups[k] = g
	return g, nil
}

// newCell adds an empty cell for d to the last part with room, or to a
// new part.
func (g *group) newCell(d Dims) *cellRef {
	var p *part
	if n := len(g.parts); n > 0 && len(g.parts[n-1].v.Cells) < MaxCells {
		p = g.parts[n-1]
	} else {
		p = &part{v: Value{V: SchemaVersion, Resolution: "", Start: g.start, Provider: d.Provider, Part: n}}
		g.parts = append(g.parts, p)
	}
	c := &Cell{Dims: d}
	p.v.Cells = append(p.v.Cells, c)
	ref := &cellRef{cell: c, part: p}
	g.cells[d] = ref
	return ref
}

// Dirty is the number of values Flush would write.
func (f *Folder) Dirty() int {
	n := 0
	for _, g := range f.groups {
		for _, p := range g.parts {
			if p.dirty {
				n++
			}
		}
	}
	return n
}

// Flush writes every changed value (compare-and-set, with its bucket's
// TTL), then forgets the buckets no record touched since the flush
// before. It stops at the first error: the values written stay written
// (their cells' Through say what they hold); ErrConflict means another
// recorder wrote one of them.
func (f *Folder) Flush(ctx context.Context) error {
	for k, g := range f.groups {
		res := f.st.Res[g.res]
		for _, p := range g.parts {
			if !p.dirty {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err // stopped: no new write goes out
			}
			p.v.Resolution = res.Name
			rev, err := f.st.put(ctx, res, &p.v, p.rev)
			if err != nil {
				return err
			}
			p.rev, p.dirty = rev, false
		}
		if !g.touched {
			delete(f.groups, k)
		}
		g.touched = false
	}
	return nil
}

package regional

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/pool"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// opSlots names, in the metrics, an acquisition of slots in the regional
// store.
const opSlots = "slots"

// TakeOutcome is how a take of slots in the regional store went.
type TakeOutcome int

const (
	// TakeAnswered: the store answered, taken or refused, or its answer
	// was lost and a read of the pool showed the take applied (taken).
	TakeAnswered TakeOutcome = iota
	// TakeNotSent: the store takes no slots, was not sent the take (its
	// breaker is open, no lane came free in time) or the clock reading was
	// stale: decide from memory, as for any limit.
	TakeNotSent
	// TakeLost: the take was sent and its answer lost, and a read of the
	// pool could not tell that the store holds it (the pool, when the
	// read answered, is merged). Decide from memory, and count its slots
	// whatever the decision: a replay writes its total (see lostTake).
	TakeLost
)

// Taken is what the regional store answered to a take of slots: whether
// it took them, what the pool holds (with this process's slots it has not
// sent yet), and, when it did not take them, how many ms until enough of
// them free themselves (see pool.FreeAfter).
type Taken struct {
	OK         bool
	Held       int64
	RetryAfter int64
}

// TakeSlots takes cost slots of the pool of w (of limit), counted in w's
// cell, at now in the regional store, in one atomic step with the
// region's count of what the pool holds, and returns the answer and w's
// cell when the store answered (or, its answer lost, a read with the
// writer's total showed the take applied). Replayed counts reach the
// store some milliseconds after they were taken, in which every process
// of the region would see the same slots free; a window's few units over
// its limit are repaid by the next window, but slots held by everyone's
// stale view stay taken for as long as they are held.
func (r *Tier) TakeSlots(ctx context.Context, w *cells.Window, now, limit, cost int64) (Taken, *cells.Cell, TakeOutcome) {
	taker, ok := r.store.(store.SlotTaker)
	if !ok {
		return Taken{}, nil, TakeNotSent
	}
	seq, _ := pool.CellOf(w)
	cur, _ := w.CellAt(seq, false)
	g := r.pools.Filed(w, r.table)
	if cur == nil || g == nil || w.Evicted() {
		return Taken{}, nil, TakeNotSent // the caller decides again on the window that replaces it
	}
	lanes := r.lanesOf(w)
	lane := lanes.acquire(ctx, r.writer, store.RequestTimeout)
	if lane == nil {
		return Taken{}, nil, TakeNotSent
	}
	total := lanes.add(lane, seq, cost)
	beyond := r.beyond(g, now)
	var counts store.SlotCounts
	_, err := r.call(ctx, opSlots, store.RequestTimeout, func(ctx context.Context) ([]int64, error) {
		var err error
		counts, err = taker.TakeSlots(ctx, store.SlotTake{Key: w.CellKey(seq), Cost: cost, Limit: limit, Now: now,
			Beyond: beyond, TTL: time.Duration(w.ExpiresAt(seq)-now) * time.Millisecond, Writer: lane.writer, Total: total})
		return nil, err
	})
	switch {
	case errors.Is(err, store.ErrUnavailable):
		// Not sent: nothing to count twice.
		lanes.add(lane, seq, -cost)
		lanes.release(lane, seq)
		return Taken{}, nil, TakeNotSent
	case err != nil:
		// The answer was lost: the store may hold the take. A read of
		// the pool tells, with the writer's total (it never shrinks):
		// a take applied and answered late is answered taken, as the
		// store would have, rather than decided again from memory
		// against a pool that already holds its slots.
		read, ok := r.readPool(ctx, w, seq, now, lane.writer)
		if !ok || read.Written < total {
			lanes.lost.Add(1)
			r.loseTake(&lostTake{w: w, lanes: lanes, lane: lane, seq: seq, total: total, cost: cost})
			if ok {
				r.mergePool(w, read.Cells)
				w.RefreshedAt.Store(now)
			}
			return Taken{}, nil, TakeLost
		}
		counts = store.SlotCounts{Taken: true, Cells: read.Cells}
	case !counts.Taken:
		lanes.add(lane, seq, -cost)
	}
	lanes.release(lane, seq)
	r.mergePool(w, counts.Cells)
	cur.Flags.Or(cells.Hydrated)
	w.RefreshedAt.Store(now)
	if counts.Taken {
		r.markLater(w, cur)
	}
	t := Taken{OK: counts.Taken, Held: counts.Held(beyond)}
	if !t.OK {
		t.RetryAfter = pool.FreeAfter(heldCells(counts, beyond), t.Held, cost, limit, now)
	}
	return t, cur, TakeAnswered
}

// mergePool merges read, what the regional store answered of w's pool,
// into the pool's windows: the store's counts, and this process's not yet
// sent, are what the region holds; cells this process did not know of
// (other leases' grids, other expiries) join the pool.
func (r *Tier) mergePool(w *cells.Window, read []store.PoolCell) {
	for _, pc := range read {
		p, ok := period.FromCode(pc.Key.Duration.Milliseconds())
		if !ok {
			continue
		}
		k := cells.Key{Workspace: pc.Key.Workspace, Namespace: pc.Key.Namespace, Identifier: pc.Key.Identifier,
			Period: p}
		pw := w
		if p != w.Period() {
			var err error
			if pw, _, err = r.table.FindOrCreate(&k); err != nil {
				continue
			}
		}
		r.merge(pw, pc.Key.Sequence, pc.Count)
		if c := pw.Cells[pc.Key.Sequence&1].Load(); c != nil && c.Seq() == pc.Key.Sequence {
			c.Flags.Or(cells.Hydrated)
		}
		k.Refunds = true
		if rw, _, err := r.table.FindOrCreate(&k); err == nil {
			rw.ObserveLimit(w.Limit.Load())
			r.merge(rw, pc.Key.Sequence, pc.Refunds)
		}
	}
}

// ReadPool brings the pool of w up to date from the regional store at
// now (unix ms): every cell of it that has not ended, as the store holds
// it. A store that cannot take slots is read cell by cell, the cells this
// process knows of.
func (r *Tier) ReadPool(ctx context.Context, w *cells.Window, now int64) {
	seq, _ := pool.CellOf(w)
	if _, ok := r.store.(store.SlotTaker); ok {
		if read, ok := r.readPool(ctx, w, seq, now, ""); ok {
			r.mergePool(w, read.Cells)
			w.RefreshedAt.Store(now)
		}
		return
	}
	g := r.pools.Of(w)
	if g == nil {
		return
	}
	var ws []*cells.Window
	for _, pc := range g.Live(now) {
		ws = append(ws, pc.W)
	}
	r.refreshNow(ctx, ws, now, opSlots)
}

// readPool reads the pool of w, its cell seq, from the regional store (a
// SlotTaker) at now (unix ms), with writer's total in the cell when
// writer is not empty, and reports whether the store answered.
func (r *Tier) readPool(ctx context.Context, w *cells.Window, seq, now int64, writer string) (store.SlotCounts, bool) {
	taker, ok := r.store.(store.SlotTaker)
	if !ok {
		return store.SlotCounts{}, false
	}
	var read store.SlotCounts
	_, err := r.call(ctx, opSlots, store.RequestTimeout, func(ctx context.Context) ([]int64, error) {
		var err error
		read, err = taker.ReadSlots(ctx, w.CellKey(seq), now, writer)
		return nil, err
	})
	return read, err == nil
}

// beyond returns what is held beyond the regional store in each cell of
// pool g that has not ended at now: the other regions' slots less their
// releases, as far as the global store told us, this process's slots
// counted from memory while the store failed, its writes of slots the
// store has not acknowledged and its takes whose answers were lost (they
// reach it with the next replay: they are held already), less its
// releases not replayed yet (a release whose write failed frees its slot
// here once the replay has sent it: strict meanwhile). A release answered
// in another region frees a slot counted here: each cell is summed over
// the regions before it is clamped, never each region's part alone.
func (r *Tier) beyond(g *pool.Group, now int64) []store.PoolCell {
	var out []store.PoolCell
	for _, pc := range g.Live(now) {
		seq, _ := pool.CellOf(pc.W)
		var n int64
		if c := pc.W.Cells[seq&1].Load(); c != nil && c.Seq() == seq {
			n += c.Global.Load() + c.Unreplayed.Load() + r.unacked(pc.W, seq)
		}
		if pc.Refunds != nil {
			if rc := pc.Refunds.Cells[seq&1].Load(); rc != nil && rc.Seq() == seq {
				n -= rc.Global.Load() + rc.Unreplayed.Load()
			}
		}
		n += r.lostTakes(pc.W, seq)
		if n != 0 {
			out = append(out, store.PoolCell{Key: pc.W.CellKey(seq), Count: n})
		}
	}
	return out
}

// heldCells returns what each cell of an answer holds with beyond, and
// when it ends, for pool.FreeAfter.
func heldCells(counts store.SlotCounts, beyond []store.PoolCell) []pool.Held {
	cells := make([]pool.Held, 0, len(counts.Cells)+len(beyond))
	for _, pc := range counts.Cells {
		if n := pc.HeldWith(beyond); n > 0 {
			cells = append(cells, pool.Held{End: store.PoolCellEndOf(&pc.Key), Count: n})
		}
	}
	for _, b := range beyond {
		if !slices.ContainsFunc(counts.Cells, func(pc store.PoolCell) bool { return pc.Key == b.Key }) && b.Count > 0 {
			cells = append(cells, pool.Held{End: store.PoolCellEndOf(&b.Key), Count: b.Count})
		}
	}
	return cells
}

// loseTake keeps t, a take whose answer was lost, for the next replay,
// its lane held until then.
func (r *Tier) loseTake(t *lostTake) {
	r.lost.mu.Lock()
	r.lost.takes = append(r.lost.takes, t)
	r.lost.mu.Unlock()
}

// lostTakes returns what w's takes whose answers were lost took in cell
// seq: held, whether or not the store has them yet.
func (r *Tier) lostTakes(w *cells.Window, seq int64) int64 {
	r.lost.mu.Lock()
	defer r.lost.mu.Unlock()
	var n int64
	for _, t := range r.lost.takes {
		if t.w == w && t.seq == seq {
			n += t.cost
		}
	}
	return n
}

// resendTakes writes the totals of the takes whose answers were lost, at
// now (unix ms), and frees the lanes of those the store took (or whose
// cells ended); the others wait for the next replay. They stay listed,
// and counted as held, until the store has answered.
func (r *Tier) resendTakes(ctx context.Context, now int64) {
	r.lost.mu.Lock()
	takes := slices.Clone(r.lost.takes)
	r.lost.mu.Unlock()
	if len(takes) == 0 {
		return
	}
	var incs []store.Increment
	var sent, done []*lostTake
	for _, t := range takes {
		if _, end := pool.CellOf(t.w); end <= now {
			done = append(done, t) // the cell counts nowhere now
			continue
		}
		incs = append(incs, store.Increment{Key: t.w.CellKey(t.seq), Writer: t.lane.writer, Total: t.total,
			TTL: time.Duration(t.w.ExpiresAt(t.seq)-now) * time.Millisecond})
		sent = append(sent, t)
	}
	if len(incs) > 0 {
		counts, _ := r.call(ctx, OpReplay, backgroundTimeout, func(ctx context.Context) ([]int64, error) {
			return r.store.Increment(ctx, incs)
		})
		for i, t := range sent {
			if i < len(counts) && counts[i] >= 0 {
				done = append(done, t)
			}
		}
	}
	if len(done) == 0 {
		return
	}
	r.lost.mu.Lock()
	r.lost.takes = slices.DeleteFunc(r.lost.takes, func(t *lostTake) bool { return slices.Contains(done, t) })
	r.lost.mu.Unlock()
	for _, t := range done {
		t.lanes.lost.Add(-1)
		t.lanes.release(t.lane, t.seq)
	}
}

// WriteThrough adds amount to c, a cell of a concurrency limit's window w or
// of its releases, in the regional store at once, so that the region's
// next acquisition, in any process, sees it (a release: the slots free; an
// extension's count: the slots still held); and reports false when the
// store failed: the replay sends it again, with this process's total of
// the cell, which holds amount (see increment), and the caller adds it to
// nothing else that is replayed.
func (r *Tier) WriteThrough(ctx context.Context, w *cells.Window, c *cells.Cell, amount int64) bool {
	now := r.clock.Now().UnixMilli()
	inc := r.increment(w, c, amount, now)
	if r.mark != nil {
		inc.Mark = r.mark(w, c)
	}
	counts, err := r.call(ctx, opSlots, store.RequestTimeout, func(ctx context.Context) ([]int64, error) {
		return r.store.Increment(ctx, []store.Increment{inc})
	})
	return r.written(w, c, inc, counts, err, now)
}

// written takes the store's answer to inc, a write of amount to c (a
// cell of w) at once, and reports whether the store took it: it raises
// c to what the store holds, or, when the write failed, leaves it to the
// replay (a total is sent again as it is).
func (r *Tier) written(w *cells.Window, c *cells.Cell, inc store.Increment, counts []int64, err error, now int64) bool {
	if err != nil || len(counts) != 1 || counts[0] < 0 {
		if inc.Mark > 0 {
			// Not marked after all: the replay that sends amount marks it.
			c.Flags.And(^cells.Marked)
		}
		if inc.Writer != "" {
			// A refunds cell's total holds amount: the replay sends it
			// again as it is, and the caller must not add amount again.
			r.resend(w, c, inc)
		}
		return false
	}
	r.models.Raise(w, c, &c.Count, counts[0]+c.Unreplayed.Load()+c.Speculative.Load(), now)
	cells.AtomicMax(&c.Stored, counts[0])
	if inc.Writer != "" {
		r.acked(w, c.Seq(), inc.Total)
	}
	// Not marked when the mark was decided before c held amount (an
	// extension's count, which may make the cell worth sharing).
	r.markLater(w, c)
	return true
}

// Release writes amount, given back to c (a cell of rw, the releases of
// w's pool cell), to the regional store at once, as WriteThrough does,
// and reads w's pool in the same round trip where the store can
// (store.SlotTaker): it reports whether it did, and merged what the pool
// holds. w may be nil (the table holds no window of the cell): then the
// release is written through alone.
func (r *Tier) Release(ctx context.Context, w, rw *cells.Window, c *cells.Cell, amount int64) bool {
	taker, ok := r.store.(store.SlotTaker)
	if !ok || w == nil {
		r.WriteThrough(ctx, rw, c, amount)
		return false
	}
	now := r.clock.Now().UnixMilli()
	inc := r.increment(rw, c, amount, now)
	if r.mark != nil {
		inc.Mark = r.mark(rw, c)
	}
	var cells []store.PoolCell
	counts, err := r.call(ctx, opSlots, store.RequestTimeout, func(ctx context.Context) ([]int64, error) {
		n, read, err := taker.ReleaseSlots(ctx, inc, now)
		cells = read
		return []int64{n}, err
	})
	if !r.written(rw, c, inc, counts, err, now) {
		return false
	}
	r.mergePool(w, cells)
	w.RefreshedAt.Store(now)
	return true
}

// markLater queues c, a cell of w whose count the regional store took at
// once (slots taken, or a write-through), for a replay that marks it in the
// store's index of cells to publish, since no replay sends that count:
// without the mark, what the cell holds is lost to the other regions if
// this process dies or loses the global store before it publishes it. The
// replay sends the cell without an increment if it is worth marking then
// (see cells.ToMark); a cell marked this full flush interval is not queued.
func (r *Tier) markLater(w *cells.Window, c *cells.Cell) {
	if r.mark != nil && c.Flags.Load()&cells.Marked == 0 {
		c.Flags.Or(cells.ToMark)
		r.QueueReplay(w, c, 0)
	}
}

// ReadSlots brings the pools of the concurrency limits ws (a window of
// each) up to date from the regional store, one read a pool; a failed
// read leaves them as they are.
func (r *Tier) ReadSlots(ctx context.Context, ws []*cells.Window, now int64) {
	for _, w := range ws {
		r.ReadPool(ctx, w, now)
	}
}

// laneTotals appends to incs the settled totals of the lanes this
// process took w's slots through in cell seq, at now (unix ms).
func (r *Tier) laneTotals(incs []store.Increment, w *cells.Window, seq, now int64) []store.Increment {
	lanes, ok := r.lanes.Load(w)
	if !ok {
		return incs
	}
	ttl := time.Duration(w.ExpiresAt(seq)-now) * time.Millisecond
	lanes.settled(seq, func(writer string, total int64) {
		incs = append(incs, store.Increment{Key: w.CellKey(seq), Writer: writer, Total: total, TTL: ttl})
	})
	return incs
}

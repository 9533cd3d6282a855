package ratelimit

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// A concurrency limit is one pool of slots per workspace, namespace and
// identifier, whatever lease each holder chose. A slot is counted in the
// cell of its expiry on a grid fitted to its lease (see store.PoolShift):
// a second, or the largest power of two seconds within a tenth of the
// lease. Each such cell is a window of its own in the table (its period
// names grid and cell: see period.PoolCell), with one cell, replicated,
// published and refunded as every window's cells are; the pool is the
// group of those windows, and what it holds is the sum of its cells that
// have not ended, each less its releases, never below zero. A slot frees
// itself when its cell ends: at its lease's end, less than a second or a
// tenth of the lease later. A release frees it in its cell, which the
// lease id names (grid from the lease, and the cell). A lease spans 10 to
// 20 cells of its grid, so a pool of one lease sums about as many cells.

// acquireSlots is Service.Decide for req, an acquisition (or, at cost 0,
// a check) of a concurrency limit, which is no model (see model): in the
// window of the cell a slot taken now is counted in, found again at each
// attempt because that cell moves with the clock, from the whole pool,
// and through the regional store's atomic take where there is one (see
// decideSlots).
func (s *Service) acquireSlots(ctx context.Context, req *Request, sp spec) (Response, error) {
	now := s.clock.Now().UnixMilli()
	for attempt := range maxEvictionRetries {
		if attempt > 0 {
			// The janitor removed the window, or read a later clock
			// than ours: decide again now, in the cell of now.
			now = s.clock.Now().UnixMilli()
		}
		key := poolKey(req, now)
		w, err := s.windows.ForRequest(&key)
		if err != nil {
			return Response{Limit: req.Limit, Reset: resetAt(req, now), Algorithm: sp.algorithm}, err
		}
		if now < s.windows.JanitorNow.Load() {
			continue // the janitor may have removed the cell of now
		}
		w.ObserveLimit(req.Limit)
		if resp, ok := s.decideSlots(ctx, w, now, sp, req); ok {
			return resp, nil
		}
	}
	// Unreachable in practice: the janitor kept removing the window under
	// this request. Fail closed.
	return Response{Limit: req.Limit, Reset: resetAt(req, now), Algorithm: sp.algorithm}, nil
}

// poolID names a pool: a concurrency limit's identity.
type poolID struct {
	workspace, namespace, identifier string
}

// poolGroup holds the windows of one pool's cells this process counted
// in or learned of, each beside the window of its releases once there is
// one: a decision reads them all, without a lookup. mu also serializes
// the decisions on the pool, which read every cell and count into one:
// two decisions that each saw the last slot free must not both take it.
type poolGroup struct {
	mu    sync.Mutex
	cells []poolCell
}

// poolCell is the window of one cell of a pool and the window of its
// releases, nil until there is one.
type poolCell struct {
	w, refunds *cells.Window
}

// pools holds the table's pools, by identity and by the windows of their
// cells.
type pools struct {
	groups   *xsync.Map[poolID, *poolGroup]
	byWindow *xsync.Map[*cells.Window, *poolGroup]
}

// poolIDOf returns the pool of w, a pool cell's window.
func poolIDOf(w *cells.Window) poolID {
	k := w.Key()
	return poolID{k.Workspace, k.Namespace, k.Identifier}
}

// isPool reports whether w is a window of a pool's cell (not of its
// releases).
func isPool(w *cells.Window) bool { return w.Period().Kind() == period.Pool && !w.HoldsRefunds() }

// add files w, a pool cell's window new in the table, or the window of
// its releases, in its pool, once: a window the janitor is removing is
// not filed, nor one filed already. other returns the cell's other
// window (its releases', for a cell's; the cell's, for its releases'),
// nil if the table holds none; it runs while the pool is held.
func (p *pools) add(w *cells.Window, other func() *cells.Window) {
	p.groups.Compute(poolIDOf(w), func(g *poolGroup, loaded bool) (*poolGroup, xsync.ComputeOp) {
		if w.Evicted() || !loaded && w.HoldsRefunds() {
			// Removed meanwhile; or releases of a cell no window of
			// which is filed: its window, when made, finds them.
			return g, xsync.CancelOp
		}
		if !loaded {
			g = &poolGroup{}
		}
		o := other()
		g.mu.Lock()
		defer g.mu.Unlock()
		if !w.HoldsRefunds() {
			if !slices.ContainsFunc(g.cells, func(c poolCell) bool { return c.w == w }) {
				g.cells = append(g.cells, poolCell{w: w, refunds: o})
				p.byWindow.Store(w, g)
			}
			return g, xsync.UpdateOp
		}
		for i := range g.cells {
			if g.cells[i].w == o {
				g.cells[i].refunds = w
			}
		}
		return g, xsync.UpdateOp
	})
}

// remove takes w, evicted, out of its pool: a cell's window with its
// releases', or the releases' alone.
func (p *pools) remove(w *cells.Window) {
	p.byWindow.Delete(w)
	p.groups.Compute(poolIDOf(w), func(g *poolGroup, loaded bool) (*poolGroup, xsync.ComputeOp) {
		if !loaded {
			return nil, xsync.CancelOp
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if w.HoldsRefunds() {
			for i := range g.cells {
				if g.cells[i].refunds == w {
					g.cells[i].refunds = nil
				}
			}
			return g, xsync.CancelOp
		}
		g.cells = slices.DeleteFunc(g.cells, func(c poolCell) bool { return c.w == w })
		if len(g.cells) == 0 {
			return nil, xsync.DeleteOp
		}
		return g, xsync.CancelOp
	})
}

// of returns the pool of w, a pool cell's window. A window the janitor
// removed meanwhile has none: the caller decides again on the window that
// replaces it.
func (p *pools) of(w *cells.Window) *poolGroup {
	g, _ := p.byWindow.Load(w)
	return g
}

// poolOf returns the pool of w, a pool cell's window, filing w first if
// another request made it and has not filed it yet (filing is idempotent);
// nil if the janitor is removing w.
func (t *windowTable) poolOf(w *cells.Window) *poolGroup {
	if g := t.pools.of(w); g != nil || w.Evicted() {
		return g
	}
	t.Filed(w)
	return t.pools.of(w)
}

// live returns g's cells that have not ended at now (unix ms).
func (g *poolGroup) live(now int64) []poolCell {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]poolCell, 0, len(g.cells))
	for _, c := range g.cells {
		if _, end := poolCellOf(c.w); end > now {
			out = append(out, c)
		}
	}
	return out
}

// holdsPool reports whether the table holds a pool of k's identity.
func (t *windowTable) holdsPool(k *cells.Key) bool {
	_, ok := t.pools.groups.Load(poolID{k.Workspace, k.Namespace, k.Identifier})
	return ok
}

// poolKey returns the key of the cell a slot of the concurrency limit of
// req (its lease in Duration) acquired at now (unix ms) is counted in.
func poolKey(req *Request, now int64) cells.Key {
	return cells.Key{Workspace: req.Workspace, Namespace: req.Namespace, Identifier: req.Identifier,
		Period: period.ForLease(req.Duration.Milliseconds(), now)}
}

// poolCellOf returns the cell of w, a pool cell's window, and when it ends
// (unix ms).
func poolCellOf(w *cells.Window) (seq, end int64) {
	p := w.Period()
	return p.Cell(), p.CellEnd()
}

// heldCell is what one cell of a pool holds, and when it frees it.
type heldCell struct {
	end, held int64
}

// freeAfter returns how many ms after now enough of cells free
// themselves, if none is released, for cost more under limit with held
// held; 0 when cost is past the limit, which no expiry helps.
func freeAfter(cells []heldCell, held, cost, limit, now int64) int64 {
	if cost > limit {
		return 0
	}
	slices.SortFunc(cells, func(a, b heldCell) int { return int(min(max(a.end-b.end, -1), 1)) })
	for _, c := range cells {
		held -= c.held
		if held+cost <= limit {
			return max(c.end-now, 0)
		}
	}
	return 0
}

// poolHeld returns what the cells of g hold at now (unix ms), as this
// process knows them (this region's counts and the other regions', less
// the releases of both), and, if cells is not nil, appends each cell's
// part to it. g.mu is held.
func poolHeld(g *poolGroup, now int64, cells *[]heldCell) int64 {
	var held int64
	for _, pc := range g.cells {
		seq, end := poolCellOf(pc.w)
		if end <= now {
			continue
		}
		c := pc.w.Cells[seq&1].Load()
		if c == nil || c.Seq() != seq {
			continue
		}
		n := c.Count.Load() + c.Global.Load()
		if pc.refunds != nil {
			if r := pc.refunds.Cells[seq&1].Load(); r != nil && r.Seq() == seq {
				n -= r.Count.Load() + r.Global.Load()
			}
		}
		if n > 0 {
			held += n
			if cells != nil {
				*cells = append(*cells, heldCell{end, n})
			}
		}
	}
	return held
}

// checkPoolOf answers a check (cost 0) of the concurrency limit of req at
// now (unix ms) from what this process knows, through w, a window of the
// pool (a held slot's cell), the regional store not read: after a release
// that read the pool with it. The answer's Reset is the end of the cell a
// slot taken now would be counted in, as a check answers. It reports
// false when it could not (the janitor removed w).
func (s *Service) checkPoolOf(w *cells.Window, req *Request, now int64) (Response, bool) {
	d, cur, _ := s.decidePool(w, now, specOf(req), 0)
	if cur == nil {
		return Response{}, false
	}
	d.resetMs = period.ForLease(req.Duration.Milliseconds(), now).CellEnd()
	return d.response(), true
}

// decidePool decides an acquisition of cost slots (0: a check of what is
// held) of sp's pool, counted into w's cell, from what this process knows
// at now (unix ms), and counts it if it fits. It returns w's cell and
// whether it counted cost into it; nil, when the janitor removed w
// meanwhile.
func (s *Service) decidePool(w *cells.Window, now int64, sp spec, cost int64) (decision, *cells.Cell, bool) {
	seq, end := poolCellOf(w)
	cur, _ := w.CellAt(seq, s.regional == nil)
	g := s.windows.poolOf(w)
	if cur == nil || g == nil {
		return decision{}, nil, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	held := poolHeld(g, now, nil)
	d := decision{algorithm: Concurrency, limit: sp.limit, capacity: sp.limit, resetMs: end}
	if cost > sp.limit || held > sp.limit-cost {
		var cells []heldCell
		poolHeld(g, now, &cells)
		d.remaining = min(max(sp.limit-held, 0), sp.limit)
		d.retryAfter = freeAfter(cells, held, cost, sp.limit, now)
		return d, cur, false
	}
	d.success = true
	d.remaining = sp.limit - held - cost
	if cost == 0 {
		return d, cur, false
	}
	addCapped(&cur.Count, cost)
	return d, cur, true
}

// LeaseCell returns the cell that the slots of a lease of lease, which an
// acquisition or extension answered with resp, are counted in: the one
// that ends at resp.Reset.
func LeaseCell(resp Response, lease time.Duration) int64 {
	return store.PoolCellOf(store.PoolShift(lease.Milliseconds()), resp.Reset.UnixMilli())
}

// LeaseEnd returns when the slots of a lease of lease counted in cell
// free themselves if they are not released: the cell's end.
func LeaseEnd(lease time.Duration, cell int64) time.Time {
	return time.UnixMilli(period.OfLease(lease.Milliseconds(), cell).CellEnd())
}

// decideSlots decides req, an acquisition (or, at cost 0, a check) of
// slots of the pool of w, w's cell the one its slots are counted in, at
// now (unix ms). It reports false when the janitor removed w meanwhile:
// the caller decides again.
func (s *Service) decideSlots(ctx context.Context, w *cells.Window, now int64, sp spec, req *Request) (Response, bool) {
	lost := false
	if s.regional != nil && req.Cost > 0 {
		// Slots are taken in the regional store, atomically; from
		// memory only when it fails.
		d, cur, outcome := s.regional.takeSlots(ctx, w, now, sp, req.Cost)
		if outcome == takeAnswered {
			if d.success {
				s.global.noteGrowth(w, cur, req.Limit)
			}
			s.regional.afterDecide(w, cur, now, &d, 0)
			return d.response(), true
		}
		// The store took no slots, or failed: decide from memory, as a
		// strict key does, after a read of what the region holds (the
		// store's reads may answer where its writes did not). What the
		// others took since their last replay is all this process
		// cannot know.
		s.regional.makeStrict(w, now)
		lost = outcome == takeLost
	}
	if s.regional != nil {
		// A check, or a take the store did not answer: what the region
		// holds, read in the store first, every cell of the pool.
		s.regional.readPool(ctx, w, now)
	}
	s.regional.prepare(ctx, w, now)
	d, cur, counted := s.decidePool(w, now, sp, req.Cost)
	if cur == nil {
		runtime.Gosched() // the janitor is removing w: let it
		return Response{}, false
	}
	switch {
	case lost:
		// The take's answer was lost: the store may hold its slots,
		// and a replay writes the take's total so that it does, once
		// (see lostTake). Counted here whatever the decision: denied,
		// they are held by no one until their cell ends, counted once,
		// never twice, and never freed where no one took them.
		if !counted {
			addCapped(&cur.Count, req.Cost)
		}
		s.regional.afterDecide(w, cur, now, &d, 0)
		s.global.noteGrowth(w, cur, req.Limit)
		return d.response(), true
	case counted && w.Evicted():
		// The janitor is removing w: take the count back and decide
		// again on the window that replaces it.
		cur.Count.Add(-req.Cost)
		runtime.Gosched()
		return Response{}, false
	}
	s.regional.afterDecide(w, cur, now, &d, countedCost(counted, req.Cost))
	if counted {
		s.global.noteGrowth(w, cur, req.Limit)
	}
	return d.response(), true
}

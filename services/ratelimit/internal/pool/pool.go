// Package pool keeps a concurrency limit's pools: the windows of each
// pool's cells, grouped by the limit's identity, and what they hold.
//
// A concurrency limit is one pool of slots per workspace, namespace and
// identifier, whatever lease each holder chose. A slot is counted in the
// cell of its expiry on a grid fitted to its lease (see store.PoolShift):
// a second, or the largest power of two seconds within a tenth of the
// lease. Each such cell is a window of its own in the cell table (its
// period names grid and cell: see period.PoolCell), with one cell,
// replicated, published and refunded as every window's cells are; the
// pool is the [Group] of those windows, and what it holds is the sum of
// its cells that have not ended, each less its releases, never below
// zero. A slot frees itself when its cell ends: at its lease's end, less
// than a second or a tenth of the lease later. A release frees it in its
// cell, which the lease id names (grid from the lease, and the cell). A
// lease spans 10 to 20 cells of its grid, so a pool of one lease sums
// about as many cells.
package pool

import (
	"slices"
	"sync"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// id names a pool: a concurrency limit's identity.
type id struct {
	workspace, namespace, identifier string
}

// Group holds the windows of one pool's cells this process counted in or
// learned of, each beside the window of its releases once there is one: a
// decision reads them all, without a lookup. Its lock (Lock, Unlock)
// also serializes the decisions on the pool, which read every cell and count into one: two
// decisions that each saw the last slot free must not both take it.
type Group struct {
	sync.Mutex
	cells []Cell
}

// Cell is the window of one cell of a pool (W) and the window of its
// releases (Refunds), nil until there is one.
type Cell struct {
	W, Refunds *cells.Window
}

// Set holds a table's pools, by identity and by the windows of their
// cells. The zero Set is not ready: call Init.
type Set struct {
	groups   *xsync.Map[id, *Group]
	byWindow *xsync.Map[*cells.Window, *Group]
}

// Init readies an empty set.
func (p *Set) Init() {
	p.groups = xsync.NewMap[id, *Group]()
	p.byWindow = xsync.NewMap[*cells.Window, *Group]()
}

// idOf returns the pool of w, a pool cell's window.
func idOf(w *cells.Window) id {
	k := w.Key()
	return id{k.Workspace, k.Namespace, k.Identifier}
}

// IsCell reports whether p names a cell of a pool (its slots' window, or
// its releases').
func IsCell(p period.Period) bool { return p.Kind() == period.Pool }

// IsPool reports whether w is a window of a pool's cell (not of its
// releases).
func IsPool(w *cells.Window) bool { return w.Period().Kind() == period.Pool && !w.HoldsRefunds() }

// add files w, a pool cell's window new in the table, or the window of its
// releases, in its pool, once: a window the janitor is removing is not
// filed, nor one filed already. other returns the cell's other window (its
// releases', for a cell's; the cell's, for its releases'), nil if the
// table holds none; it runs while the pool is held.
func (p *Set) add(w *cells.Window, other func() *cells.Window) {
	p.groups.Compute(idOf(w), func(g *Group, loaded bool) (*Group, xsync.ComputeOp) {
		if w.Evicted() || !loaded && w.HoldsRefunds() {
			// Removed meanwhile; or releases of a cell no window of
			// which is filed: its window, when made, finds them.
			return g, xsync.CancelOp
		}
		if !loaded {
			g = &Group{}
		}
		o := other()
		g.Lock()
		defer g.Unlock()
		if !w.HoldsRefunds() {
			if !slices.ContainsFunc(g.cells, func(c Cell) bool { return c.W == w }) {
				g.cells = append(g.cells, Cell{W: w, Refunds: o})
				p.byWindow.Store(w, g)
			}
			return g, xsync.UpdateOp
		}
		for i := range g.cells {
			if g.cells[i].W == o {
				g.cells[i].Refunds = w
			}
		}
		return g, xsync.UpdateOp
	})
}

// File files w, new in table, a pool cell's window or its releases', in
// its pool (see add): the other window of the cell (its
// releases', or the cell's) is looked up while the pool is held, so that
// a pair made at once is filed together whichever comes second.
func (p *Set) File(w *cells.Window, table *cells.Table) {
	k := w.Key()
	k.Refunds = !k.Refunds
	p.add(w, func() *cells.Window { return table.Find(&k) })
}

// Filed returns the pool of w, a pool cell's window in table, filing w
// first if another request made it and has not filed it yet (filing is
// idempotent); nil if the janitor is removing w.
func (p *Set) Filed(w *cells.Window, table *cells.Table) *Group {
	if g := p.Of(w); g != nil || w.Evicted() {
		return g
	}
	p.File(w, table)
	return p.Of(w)
}

// Remove takes w, evicted, out of its pool: a cell's window with its
// releases', or the releases' alone.
func (p *Set) Remove(w *cells.Window) {
	p.byWindow.Delete(w)
	p.groups.Compute(idOf(w), func(g *Group, loaded bool) (*Group, xsync.ComputeOp) {
		if !loaded {
			return nil, xsync.CancelOp
		}
		g.Lock()
		defer g.Unlock()
		if w.HoldsRefunds() {
			for i := range g.cells {
				if g.cells[i].Refunds == w {
					g.cells[i].Refunds = nil
				}
			}
			return g, xsync.CancelOp
		}
		g.cells = slices.DeleteFunc(g.cells, func(c Cell) bool { return c.W == w })
		if len(g.cells) == 0 {
			return nil, xsync.DeleteOp
		}
		return g, xsync.CancelOp
	})
}

// Of returns the pool of w, a pool cell's window, nil if w is filed in
// none. A window the janitor removed meanwhile has none: the caller
// decides again on the window that replaces it.
func (p *Set) Of(w *cells.Window) *Group {
	g, _ := p.byWindow.Load(w)
	return g
}

// Holds reports whether the set holds a pool of k's identity.
func (p *Set) Holds(k *cells.Key) bool {
	_, ok := p.groups.Load(id{k.Workspace, k.Namespace, k.Identifier})
	return ok
}

// Live returns g's cells that have not ended at now (unix ms).
func (g *Group) Live(now int64) []Cell {
	g.Lock()
	defer g.Unlock()
	out := make([]Cell, 0, len(g.cells))
	for _, c := range g.cells {
		if _, end := CellOf(c.W); end > now {
			out = append(out, c)
		}
	}
	return out
}

// CellOf returns the cell of w, a pool cell's window, and when it ends
// (unix ms).
func CellOf(w *cells.Window) (seq, end int64) {
	p := w.Period()
	return p.Cell(), p.CellEnd()
}

// Held is what one cell of a pool holds (Count), and when it frees it
// (End, unix ms).
type Held struct {
	End, Count int64
}

// FreeAfter returns how many ms after now enough of cells free
// themselves, if none is released, for cost more under limit with held
// held; 0 when cost is past the limit, which no expiry helps.
func FreeAfter(cells []Held, held, cost, limit, now int64) int64 {
	if cost > limit {
		return 0
	}
	slices.SortFunc(cells, func(a, b Held) int { return int(min(max(a.End-b.End, -1), 1)) })
	for _, c := range cells {
		held -= c.Count
		if held+cost <= limit {
			return max(c.End-now, 0)
		}
	}
	return 0
}

// Held returns what the cells of g hold at now (unix ms), as this process
// knows them (this region's counts and the other regions', less the
// releases of both), and, if cells is not nil, appends each cell's part to
// it. g is locked.
func (g *Group) Held(now int64, cells *[]Held) int64 {
	var held int64
	for _, pc := range g.cells {
		seq, end := CellOf(pc.W)
		if end <= now {
			continue
		}
		c := pc.W.Cells[seq&1].Load()
		if c == nil || c.Seq() != seq {
			continue
		}
		n := c.Count.Load() + c.Global.Load()
		if pc.Refunds != nil {
			if r := pc.Refunds.Cells[seq&1].Load(); r != nil && r.Seq() == seq {
				n -= r.Count.Load() + r.Global.Load()
			}
		}
		if n > 0 {
			held += n
			if cells != nil {
				*cells = append(*cells, Held{end, n})
			}
		}
	}
	return held
}

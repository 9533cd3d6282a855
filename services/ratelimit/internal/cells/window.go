package cells

import (
	"strings"
	"sync/atomic"
	"time"
	"unique"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Window holds the cells of one key. Keeping a key's cells together means a
// decision costs one map lookup. Cells sit in two slots indexed by seq&1: the
// current and the previous window; a new window replaces the cell two
// windows old. A cell booked ahead (a request that waits for the next
// window: see BookAhead) waits in Next until a request of its window, or
// a newer cell, puts it in its slot.
type Window struct {
	// scope and identifier are the window's key. The workspace,
	// namespace and period, shared by many windows, are interned behind
	// one pointer, which keeps a window at 80 bytes (the allocator's
	// 80-byte size class). A pool cell's period is its own, so each live
	// pool cell of a namespace interns a scope of its own: a few dozen a
	// pool (a concurrency limit's cells), freed with their windows.
	scope      unique.Handle[windowScope]
	identifier string
	Cells      [2]atomic.Pointer[Cell]
	// Next is the newest cell made for the window: the current one, or
	// the one after it, made ahead for requests booked into it before
	// it begins (see BookAhead). Every cell newer than both slots' is made
	// here first, so that one booked ahead is the one its window's slot
	// takes when it begins, never a second cell of the same sequence.
	Next atomic.Pointer[Cell]
	// Limit is the most recent limit a request gave for this key. The global
	// flush publishes a cell once its count reaches a share of it.
	Limit atomic.Int64
	// RefreshedAt is the unix ms at which the latest read of the window's
	// cells from the regional store began. Claiming it by compare-and-swap
	// is what keeps refreshes to one per window and interval.
	RefreshedAt atomic.Int64
	// StrictUntil is the unix ms until which the key is in strict mode: one
	// duration after its latest denial or near-limit admission. Strict
	// decisions refresh from the regional store first (at most once per
	// regional.StrictRefresh), across the boundary of a fixed window too, which is where
	// processes that only know their own admissions would otherwise each admit
	// again.
	StrictUntil atomic.Int64
	// state packs, to save the bytes of separate fields:
	//   bit 63      evicted: set by the janitor before it removes the window
	//               from the map. A request that counted into an evicted
	//               window takes its count back and decides again.
	//   bits 16-62  transitions begun by batches (apply and roll back change
	//               count and speculative one after the other);
	//   bits 0-15   transitions in progress.
	// A reader that sees none in progress before, and the same number begun
	// after, reading both counters has a consistent pair. See Committed.
	state atomic.Uint64
}

const (
	stateEvicted    = uint64(1) << 63
	stateInProgress = uint64(1)<<16 - 1
	stateBegun      = ^stateEvicted &^ stateInProgress
	// transitionStep begins one transition: one more begun, one more in
	// progress. 2^47 transitions would wrap the count into the evicted bit:
	// at a million a second, after four years of batches on one window.
	transitionStep = uint64(1)<<16 + 1
)

// windowScope is what a window interns, the part of its key that many
// windows share: its workspace, namespace and period (what its cells
// are), and whether it holds the refunds of its key rather than the key's
// counts (see Service.GiveBack).
type windowScope struct {
	workspace string
	namespace string
	period    period.Period
	refunds   bool
}

// NewWindow returns an empty window for k. It copies the identifier so the
// window does not pin the request buffer it was decoded from.
func NewWindow(k *Key) *Window {
	return &Window{
		scope:      unique.Make(windowScope{workspace: k.Workspace, namespace: k.Namespace, period: k.Period, refunds: k.Refunds}),
		identifier: strings.Clone(k.Identifier),
	}
}

// Is reports whether w is the window of k.
func (w *Window) Is(k *Key) bool {
	if w.identifier != k.Identifier {
		return false
	}
	sc := w.scope.Value()
	return sc.period == k.Period && sc.namespace == k.Namespace && sc.workspace == k.Workspace && sc.refunds == k.Refunds
}

// Period returns what w's cells are.
func (w *Window) Period() period.Period { return w.scope.Value().period }

// Key returns w's key.
func (w *Window) Key() Key {
	sc := w.scope.Value()
	return Key{Workspace: sc.workspace, Namespace: sc.namespace, Identifier: w.identifier,
		Period: sc.period, Refunds: sc.refunds}
}

// HoldsRefunds reports whether w holds the refunds of its key rather than
// its counts: a window no decision is made on.
func (w *Window) HoldsRefunds() bool { return w.scope.Value().refunds }

// RefundsKey returns the key of the window that holds w's refunds.
func (w *Window) RefundsKey() Key {
	k := w.Key()
	k.Refunds = true
	return k
}

// GivenKey returns the key of the window that holds the tokens given
// back to w, a token bucket's window (see period.Period.Given): a refunds
// window of its own, beside RefundsKey's, which holds the bucket's seed.
func (w *Window) GivenKey() Key {
	k := w.Key()
	k.Period = k.Period.Given()
	k.Refunds = true
	return k
}

// CellKey returns the name of w's cell of seq, for the stores.
func (w *Window) CellKey(seq int64) store.CellKey {
	sc := w.scope.Value()
	return store.CellKey{
		Workspace:  sc.workspace,
		Namespace:  sc.namespace,
		Identifier: w.identifier,
		Duration:   time.Duration(sc.period.Code()) * time.Millisecond,
		Sequence:   seq,
		Refunds:    sc.refunds,
	}
}

// CellsAt returns the cell of seq, creating it when the slot still holds an
// older window, and the cell of seq-1, or nil when that window saw no
// traffic. newer is the sequence another request has already moved the window
// to when it is past seq: a request whose clock reading is older than
// another's. Then both cells are nil and the caller decides at newer.
func (w *Window) CellsAt(seq int64, hydrated bool) (cur, prev *Cell, newer int64) {
	cur, newer = w.CellAt(seq, hydrated)
	if cur == nil {
		return nil, nil, newer
	}
	p := w.Cells[(seq-1)&1].Load()
	if p == nil {
		return cur, nil, 0
	}
	switch ps := p.Seq(); {
	case ps < seq-1:
		return cur, nil, 0
	case ps > seq-1:
		// The slot holds seq+1: someone is already in the next window.
		return nil, nil, ps
	}
	return cur, p, 0
}

// CellAt returns the cell of seq, creating it when its slot holds an older
// one. It returns nil and the newer sequence when the slot has moved past
// seq.
func (w *Window) CellAt(seq int64, hydrated bool) (*Cell, int64) {
	slot := &w.Cells[seq&1]
	for {
		c := slot.Load()
		if c != nil {
			switch cs := c.Seq(); {
			case cs == seq:
				return c, 0
			case cs > seq:
				return nil, cs
			}
		}
		p := w.Period()
		if !p.Holds(seq) {
			// A pool cell's window holds its own cell alone: a read
			// after the cell ended finds nothing to make, and the
			// window stays idle for the janitor.
			return nil, 0
		}
		fresh := w.made(seq, hydrated)
		if slot.CompareAndSwap(c, fresh) {
			return fresh, 0
		}
	}
}

// made returns the cell of seq to put in its slot: Next's (see next),
// or, for a sequence older than Next's (a count read for a window already
// past, which no request books into), a new one made apart.
func (w *Window) made(seq int64, hydrated bool) *Cell {
	if c := w.next(seq, hydrated); c != nil {
		return c
	}
	return w.newCell(seq, hydrated)
}

// next returns the cell of seq in Next: the one there (made ahead, or by
// a request that raced this one), or a new one put there in place of an
// older one; nil if Next holds a newer one. An older cell that no request
// took into its slot while its window lasted (its requests booked ahead,
// none decided then) takes it first: the window after it weighs it. A
// slot never holds a newer cell than Next, so each sequence has one cell.
func (w *Window) next(seq int64, hydrated bool) *Cell {
	for {
		n := w.Next.Load()
		if n != nil {
			switch ns := n.Seq(); {
			case ns == seq:
				return n
			case ns > seq:
				return nil
			}
			w.settle(n)
		}
		fresh := w.newCell(seq, hydrated)
		if w.Next.CompareAndSwap(n, fresh) {
			return fresh
		}
	}
}

// settle puts c, a cell made in Next, in its slot if the slot holds an
// older one.
func (w *Window) settle(c *Cell) {
	slot := &w.Cells[c.Seq()&1]
	for {
		old := slot.Load()
		if old != nil && old.Seq() >= c.Seq() || slot.CompareAndSwap(old, c) {
			return
		}
	}
}

// newCell returns an empty cell of w for seq (reserved if w's period
// holds reservations).
func (w *Window) newCell(seq int64, hydrated bool) *Cell {
	c := newCell(seq, hydrated)
	if w.Period().HoldsReservations() {
		c.Flags.Or(Reserved)
	}
	return c
}

// Lookup returns w's cell of seq if w holds one, in its slot or made
// ahead of its window in Next (a request booked into a window that has
// not begun is counted there, and decisions in the window before it weigh
// it: see BookAhead), or nil; it makes none.
func (w *Window) Lookup(seq int64) *Cell {
	n := w.Next.Load()
	switch {
	case n == nil || n.Seq() < seq:
		return nil
	case n.Seq() == seq:
		return n
	}
	if c := w.Cells[seq&1].Load(); c != nil && c.Seq() == seq {
		return c
	}
	return nil
}

// BookAhead returns w's cell of seq, the window after the current one,
// made ahead if need be so that requests booked into it are counted
// before it begins: its slot still holds the window before the current
// one, which a sliding window weighs until the current one ends, and
// takes it when it begins (see CellAt). It returns nil when a cell newer
// than seq was made already (the window moved on).
func (w *Window) BookAhead(seq int64, hydrated bool) *Cell { return w.next(seq, hydrated) }

// BooksAhead reports whether requests may be booked into w's cells ahead
// of their window: a sliding or fixed window's (a length's, not a
// calendar's, a bucket's or a pool's), not its refunds'.
func (w *Window) BooksAhead() bool {
	sc := w.scope.Value()
	return sc.period.Kind() == period.Length && !sc.refunds
}

// CellFor returns w's cell of seq for a count read from a store at now
// (unix ms), made if need be: a window's cell after now's is made ahead
// (see BookAhead), so that a count booked into it elsewhere does not take
// the slot of the cell a sliding window still weighs.
func (w *Window) CellFor(seq, now int64, hydrated bool) *Cell {
	if w.BooksAhead() && seq == w.SeqOf(now)+1 {
		return w.BookAhead(seq, hydrated)
	}
	c, _ := w.CellAt(seq, hydrated)
	return c
}

// CellsOf returns w's cell of now (unix ms), made if need be (hydrated,
// as CellAt makes it), and the one before (nil if it saw no traffic),
// with the cell's bounds and the clock reading to decide at: now, or when
// another request already moved w past now (its clock reading is older
// than another's), the start of w's current cell, the strictest moment
// of that cell.
func (w *Window) CellsOf(now int64, hydrated bool) (cur, prev *Cell, start, end, at int64) {
	seq, start, end := w.SeqAt(now)
	cur, prev, newer := w.CellsAt(seq, hydrated)
	for cur == nil {
		now = w.StartOf(newer)
		seq, start, end = w.SeqAt(now)
		cur, prev, newer = w.CellsAt(seq, hydrated)
	}
	return cur, prev, start, end, now
}

// CellForMerge returns w's cell of seq for a stored count, creating it only
// if the count is not zero: a window with no traffic needs no cell. A
// cell made ahead that no request took into its slot yet is the one (see
// BookAhead).
func (w *Window) CellForMerge(seq, stored int64) *Cell {
	if stored <= 0 {
		return w.Lookup(seq)
	}
	c, _ := w.CellAt(seq, true)
	return c
}

// AheadForMerge returns w's cell of seq, the one after the current one,
// for a stored count (see CellForMerge), made ahead (see BookAhead) only
// if the count is not zero.
func (w *Window) AheadForMerge(seq, stored int64) *Cell {
	if stored <= 0 {
		return w.Lookup(seq)
	}
	return w.BookAhead(seq, true)
}

// Idle reports whether w's cells, those made ahead too, are older than
// oldest: none can affect a decision that counts cells from oldest on.
func (w *Window) Idle(oldest int64) bool {
	for i := range w.Cells {
		if c := w.Cells[i].Load(); c != nil && c.Seq() >= oldest {
			return false
		}
	}
	if c := w.Next.Load(); c != nil && c.Seq() >= oldest {
		return false
	}
	return true
}

// SeqAt returns the cell of w holding now (unix ms), its start and its
// end.
func (w *Window) SeqAt(now int64) (seq, start, end int64) { return w.Period().At(now) }

// SeqOf returns the sequence of w's cell holding now (unix ms).
func (w *Window) SeqOf(now int64) int64 {
	seq, _, _ := w.SeqAt(now)
	return seq
}

// ExpiresAt returns when w's cell seq can no longer affect a decision, in
// unix ms (see store.ExpiresAt).
func (w *Window) ExpiresAt(seq int64) int64 { return w.Period().ExpiresAt(seq) }

// StrictSpan returns how long after now a key that denied, or admitted
// near its limit, stays strict: a window's length, and for a calendar the
// rest of the current period.
func (w *Window) StrictSpan(now int64) int64 { return w.Period().StrictSpan(now) }

// StartOf returns the first instant of w's cell seq, in unix ms.
func (w *Window) StartOf(seq int64) int64 { return w.Period().Start(seq) }

// ObserveLimit records limit as the key's latest. It writes only on change so
// that parallel requests on a hot key do not contend on the cache line.
func (w *Window) ObserveLimit(limit int64) {
	if w.Limit.Load() != limit {
		w.Limit.Store(limit)
	}
}

// Evicted reports whether the janitor is removing w.
func (w *Window) Evicted() bool { return w.state.Load()&stateEvicted != 0 }

func (w *Window) SetEvicted(on bool) {
	if on {
		w.state.Or(stateEvicted)
	} else {
		w.state.And(^stateEvicted)
	}
}

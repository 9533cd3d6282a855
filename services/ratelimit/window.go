package ratelimit

import (
	"strings"
	"sync/atomic"
	"time"
	"unique"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// window holds the cells of one key. Keeping a key's cells together means a
// decision costs one map lookup. Cells sit in two slots indexed by seq&1: the
// current and the previous window; a new window replaces the cell two
// windows old.
type window struct {
	// scope and identifier are the window's key. The workspace,
	// namespace and period, shared by many windows, are interned behind
	// one pointer, which keeps a window at 72 bytes (in the allocator's
	// 80-byte size class). A pool cell's period is its own, so each live
	// pool cell of a namespace interns a scope of its own: a few dozen a
	// pool (see pool.go), freed with their windows.
	scope      unique.Handle[windowScope]
	identifier string
	cells      [2]atomic.Pointer[cell]
	// limit is the most recent limit a request gave for this key. The global
	// flush publishes a cell once its count reaches a share of it.
	limit atomic.Int64
	// refreshedAt is the unix ms at which the latest read of the window's
	// cells from the regional store began. Claiming it by compare-and-swap
	// is what keeps refreshes to one per window and interval.
	refreshedAt atomic.Int64
	// strictUntil is the unix ms until which the key is in strict mode: one
	// duration after its latest denial or near-limit admission. Strict
	// decisions refresh from the regional store first (at most once per
	// strictRefresh), across the boundary of a fixed window too, which is where
	// processes that only know their own admissions would otherwise each admit
	// again.
	strictUntil atomic.Int64
	// state packs, to save the bytes of separate fields:
	//   bit 63      evicted: set by the janitor before it removes the window
	//               from the map. A request that counted into an evicted
	//               window takes its count back and decides again.
	//   bits 16-62  transitions begun by batches (apply and roll back change
	//               count and speculative one after the other);
	//   bits 0-15   transitions in progress.
	// A reader that sees none in progress before, and the same number begun
	// after, reading both counters has a consistent pair. See committed.
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

// newWindow returns an empty window for k. It copies the identifier so the
// window does not pin the request buffer it was decoded from.
func newWindow(k *windowKey) *window {
	return &window{
		scope:      unique.Make(windowScope{workspace: k.workspace, namespace: k.namespace, period: k.period, refunds: k.refunds}),
		identifier: strings.Clone(k.identifier),
	}
}

// is reports whether w is the window of k.
func (w *window) is(k *windowKey) bool {
	if w.identifier != k.identifier {
		return false
	}
	sc := w.scope.Value()
	return sc.period == k.period && sc.namespace == k.namespace && sc.workspace == k.workspace && sc.refunds == k.refunds
}

// period returns what w's cells are.
func (w *window) period() period.Period { return w.scope.Value().period }

// key returns w's key.
func (w *window) key() windowKey {
	sc := w.scope.Value()
	return windowKey{workspace: sc.workspace, namespace: sc.namespace, identifier: w.identifier,
		period: sc.period, refunds: sc.refunds}
}

// holdsRefunds reports whether w holds the refunds of its key rather than
// its counts: a window no decision is made on.
func (w *window) holdsRefunds() bool { return w.scope.Value().refunds }

// refundsKey returns the key of the window that holds w's refunds.
func (w *window) refundsKey() windowKey {
	k := w.key()
	k.refunds = true
	return k
}

// cellKey returns the name of w's cell of seq, for the stores.
func (w *window) cellKey(seq int64) store.CellKey {
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

// cellsAt returns the cell of seq, creating it when the slot still holds an
// older window, and the cell of seq-1, or nil when that window saw no
// traffic. newer is the sequence another request has already moved the window
// to when it is past seq: a request whose clock reading is older than
// another's. Then both cells are nil and the caller decides at newer.
func (w *window) cellsAt(seq int64, hydrated bool) (cur, prev *cell, newer int64) {
	cur, newer = w.cellAt(seq, hydrated)
	if cur == nil {
		return nil, nil, newer
	}
	p := w.cells[(seq-1)&1].Load()
	if p == nil {
		return cur, nil, 0
	}
	switch ps := p.seq(); {
	case ps < seq-1:
		return cur, nil, 0
	case ps > seq-1:
		// The slot holds seq+1: someone is already in the next window.
		return nil, nil, ps
	}
	return cur, p, 0
}

// cellAt returns the cell of seq, creating it when its slot holds an older
// one. It returns nil and the newer sequence when the slot has moved past
// seq.
func (w *window) cellAt(seq int64, hydrated bool) (*cell, int64) {
	slot := &w.cells[seq&1]
	for {
		c := slot.Load()
		if c != nil {
			switch cs := c.seq(); {
			case cs == seq:
				return c, 0
			case cs > seq:
				return nil, cs
			}
		}
		p := w.period()
		if !p.Holds(seq) {
			// A pool cell's window holds its own cell alone: a read
			// after the cell ended finds nothing to make, and the
			// window stays idle for the janitor.
			return nil, 0
		}
		fresh := newCell(seq, hydrated)
		if p.HoldsReservations() {
			fresh.flags.Or(cellReserved)
		}
		if slot.CompareAndSwap(c, fresh) {
			return fresh, 0
		}
	}
}

// cellForMerge returns w's cell of seq for a stored count, creating it only
// if the count is not zero: a window with no traffic needs no cell.
func (w *window) cellForMerge(seq, stored int64) *cell {
	if stored <= 0 {
		c := w.cells[seq&1].Load()
		if c == nil || c.seq() != seq {
			return nil
		}
		return c
	}
	c, _ := w.cellAt(seq, true)
	return c
}

// idle reports whether both of w's cells are older than oldest: none
// can affect a decision that counts cells from oldest on.
func (w *window) idle(oldest int64) bool {
	for i := range w.cells {
		if c := w.cells[i].Load(); c != nil && c.seq() >= oldest {
			return false
		}
	}
	return true
}

// seqAt returns the cell of w holding now (unix ms), its start and its
// end.
func (w *window) seqAt(now int64) (seq, start, end int64) { return w.period().At(now) }

// seqOf returns the sequence of w's cell holding now (unix ms).
func (w *window) seqOf(now int64) int64 {
	seq, _, _ := w.seqAt(now)
	return seq
}

// expiresAt returns when w's cell seq can no longer affect a decision, in
// unix ms (see store.ExpiresAt).
func (w *window) expiresAt(seq int64) int64 { return w.period().ExpiresAt(seq) }

// strictSpan returns how long after now a key that denied, or admitted
// near its limit, stays strict: a window's length, and for a calendar the
// rest of the current period.
func (w *window) strictSpan(now int64) int64 { return w.period().StrictSpan(now) }

// startOf returns the first instant of w's cell seq, in unix ms.
func (w *window) startOf(seq int64) int64 { return w.period().Start(seq) }

// observeLimit records limit as the key's latest. It writes only on change so
// that parallel requests on a hot key do not contend on the cache line.
func (w *window) observeLimit(limit int64) {
	if w.limit.Load() != limit {
		w.limit.Store(limit)
	}
}

// evicted reports whether the janitor is removing w.
func (w *window) evicted() bool { return w.state.Load()&stateEvicted != 0 }

func (w *window) setEvicted(on bool) {
	if on {
		w.state.Or(stateEvicted)
	} else {
		w.state.And(^stateEvicted)
	}
}

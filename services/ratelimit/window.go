package ratelimit

import (
	"strings"
	"sync/atomic"
	"time"
	"unique"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// cell is the state of one fixed window cell: one key in one sequence. Every
// field is atomic because the request path, the replay and the global loops
// touch it without locks. 48 bytes.
type cell struct {
	// flags holds the fixed window this cell counts (see seq) and the cell's
	// flags: cellHydrated, cellQueued, cellGrown, cellReseed, cellMarked and
	// cellReserved.
	// Sharing one word keeps the cell at 48 bytes, a size class of its own.
	flags cellWord
	// count is this region's count, including speculative batch increments
	// that may still roll back.
	count atomic.Int64
	// speculative is the part of count that belongs to batches which have not
	// committed yet. Nothing outside the process may see it.
	speculative atomic.Int64
	// global is the sum of the other regions' counts, imported by the global
	// sync loop. The request path only reads it; it is never published.
	global atomic.Int64
	// unreplayed is what this process accepted into the cell and has not yet
	// added to the regional store. All accepted requests of one replay
	// interval coalesce here into one command.
	unreplayed atomic.Int64
	// stored is the highest count the regional store showed this process
	// for the cell (a replay's answer, or a read): what it knows the store
	// held, and writes back to one that lost its data (see
	// regionalTier.merge).
	stored atomic.Int64
}

// seq is the fixed window the cell counts (unix ms / duration). It never
// changes: a new window gets a new cell.
func (c *cell) seq() int64 { return c.flags.seq() }

// cellWord packs a cell's sequence, which never changes, into the low 56 bits
// of one atomic word and its flags into the high 8. Flag operations leave the
// sequence untouched. 56 bits hold any sequence of a clock in milliseconds.
type cellWord struct{ v atomic.Uint64 }

const (
	flagShift = 56
	seqMask   = 1<<flagShift - 1
)

// init sets the sequence and the flags of a new cell.
func (w *cellWord) init(seq int64, flags uint32) {
	w.v.Store(uint64(seq)&seqMask | uint64(flags)<<flagShift)
}

// seq returns the sequence, sign-extended.
func (w *cellWord) seq() int64 { return int64(w.v.Load()<<(64-flagShift)) >> (64 - flagShift) }

// Load returns the flags.
func (w *cellWord) Load() uint32 { return uint32(w.v.Load() >> flagShift) }

// Or sets the flags in f and returns the old flags.
func (w *cellWord) Or(f uint32) uint32 { return uint32(w.v.Or(uint64(f)<<flagShift) >> flagShift) }

// And keeps only the flags in f and returns the old flags.
func (w *cellWord) And(f uint32) uint32 {
	return uint32(w.v.And(uint64(f&0xff)<<flagShift|seqMask) >> flagShift)
}

// Flags of a cell.
const (
	// cellHydrated: the cell holds what the regional store knew when it was
	// created, or there is no regional store, or it could not be read (then a
	// background refresh keeps trying). Requests on a cell without it wait for
	// one read of the regional store.
	cellHydrated uint32 = 1 << iota
	// cellQueued: the cell is in the replay queue.
	cellQueued
	// cellGrown: the cell is in the queue of the next prompt global flush.
	cellGrown
	// cellReseed: a read found the regional store holding less than this
	// process knows it held (it lost its data): the next replay sends the
	// cell even without an increment, with its floor.
	cellReseed
	// cellMarked: a replay marked the cell in the regional store's index of
	// cells to publish since the last full global flush (see
	// store.Unpublished), which clears it: a cell is marked at most once
	// per full flush interval.
	cellMarked
	// cellReserved: a reservation was counted into the cell, or refunds of
	// it were seen: decisions weigh it less its refunds, and reads of the
	// regional store fetch those too. Cells without it cost nothing more.
	cellReserved
)

// atomicMax raises v to n if n is larger, and reports whether it did.
func atomicMax(v *atomic.Int64, n int64) bool {
	for {
		old := v.Load()
		if n <= old {
			return false
		}
		if v.CompareAndSwap(old, n) {
			return true
		}
	}
}

// window holds the cells of one key. Keeping a key's cells together means a
// decision costs one map lookup. Cells sit in two slots indexed by seq&1: the
// current and the previous window; a new window replaces the cell two
// windows old.
type window struct {
	// scope and identifier and durationMs are the window's key. The
	// workspace and namespace, shared by many windows, are interned behind
	// one pointer, which keeps a window at 80 bytes.
	scope      unique.Handle[windowScope]
	identifier string
	durationMs int64
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

// Scope is a workspace's namespace: the part of a key that many windows
// share (a window holds it interned), and what overrides are filed under.
type Scope struct {
	Workspace string
	Namespace string
}

// windowScope is what a window interns: its scope, and whether it holds
// the refunds of its key rather than the key's counts (see Service.Refund).
type windowScope struct {
	Scope
	refunds bool
}

// newWindow returns an empty window for k. It copies the identifier so the
// window does not pin the request buffer it was decoded from.
func newWindow(k *windowKey) *window {
	return &window{
		scope:      unique.Make(windowScope{Scope{Workspace: k.workspace, Namespace: k.namespace}, k.refunds}),
		identifier: strings.Clone(k.identifier),
		durationMs: k.durationMs,
	}
}

// is reports whether w is the window of k.
func (w *window) is(k *windowKey) bool {
	if w.identifier != k.identifier || w.durationMs != k.durationMs {
		return false
	}
	sc := w.scope.Value()
	return sc.Namespace == k.namespace && sc.Workspace == k.workspace && sc.refunds == k.refunds
}

// key returns w's key.
func (w *window) key() windowKey {
	sc := w.scope.Value()
	return windowKey{workspace: sc.Workspace, namespace: sc.Namespace, identifier: w.identifier,
		durationMs: w.durationMs, refunds: sc.refunds}
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
		Workspace:  sc.Workspace,
		Namespace:  sc.Namespace,
		Identifier: w.identifier,
		Duration:   time.Duration(w.durationMs) * time.Millisecond,
		Sequence:   seq,
		Refunds:    sc.refunds,
	}
}

// newCell returns an empty cell for seq. Without a regional store there is
// nothing to hydrate from, so the cell starts hydrated.
func newCell(seq int64, hydrated bool) *cell {
	var flags uint32
	if hydrated {
		flags = cellHydrated
	}
	c := &cell{}
	c.flags.init(seq, flags)
	return c
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
		fresh := newCell(seq, hydrated)
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

// idle reports whether no cell of w can affect a decision at sequence now:
// both are older than the previous window.
func (w *window) idle(now int64) bool {
	for i := range w.cells {
		if c := w.cells[i].Load(); c != nil && c.seq() >= now-1 {
			return false
		}
	}
	return true
}

// strictRefresh returns how many ms a strict window waits between regional
// reads: strictRefreshInterval, or a hundredth of the window for windows
// under 10 s, so that short windows converge within a small share of their
// length.
func (w *window) strictRefresh() int64 {
	return min(strictRefreshInterval.Milliseconds(), w.durationMs/100)
}

// observeLimit records limit as the key's latest. It writes only on change so
// that parallel requests on a hot key do not contend on the cache line.
func (w *window) observeLimit(limit int64) {
	if w.limit.Load() != limit {
		w.limit.Store(limit)
	}
}

// beginTransition and endTransition bracket a change of both count and
// speculative by a batch, so that committed can tell a torn read.
func (w *window) beginTransition() { w.state.Add(transitionStep) }
func (w *window) endTransition()   { w.state.Add(^uint64(0)) } // one fewer in progress

// evicted reports whether the janitor is removing w.
func (w *window) evicted() bool { return w.state.Load()&stateEvicted != 0 }

func (w *window) setEvicted(on bool) {
	if on {
		w.state.Or(stateEvicted)
	} else {
		w.state.And(^stateEvicted)
	}
}

// committed returns c's regional count without speculative batch increments,
// and false when batches kept changing the cell during every attempt to read
// a consistent pair (the caller tries again later).
func (w *window) committed(c *cell) (int64, bool) {
	for range 8 {
		before := w.state.Load()
		if before&stateInProgress != 0 {
			continue
		}
		n := c.count.Load()
		s := c.speculative.Load()
		if w.state.Load()&stateBegun == before&stateBegun {
			return n - s, true
		}
	}
	return 0, false
}

// applySpeculative adds cost to c's count if it still is n, and records it
// as speculative. It reports whether the count changed.
func (w *window) applySpeculative(c *cell, n, cost int64) bool {
	w.beginTransition()
	defer w.endTransition()
	c.speculative.Add(cost)
	if c.count.CompareAndSwap(n, n+cost) {
		return true
	}
	c.speculative.Add(-cost)
	return false
}

// rollback takes back a speculative increment of cost on c.
func (w *window) rollback(c *cell, cost int64) {
	w.beginTransition()
	defer w.endTransition()
	c.count.Add(-cost)
	c.speculative.Add(-cost)
}

// commit makes a speculative increment of cost on c final. One atomic step,
// so readers of committed never see it torn.
func (w *window) commit(c *cell, cost int64) {
	c.speculative.Add(-cost)
}

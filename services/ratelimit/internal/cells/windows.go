package cells

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/puzpuzpuz/xsync/v4"
)

// Table holds every window of the process, by key, and each
// workspace's share of them. It knows no model and no tier: what they
// keep beside a window, its companion is told of (see Companion). Its
// methods are safe for concurrent use.
type Table struct {
	seed    maphash.Seed
	HashKey func(k Key, seed maphash.Seed) uint64 // tests force collisions
	// byHash maps a key's hash to its window. A generic lock-free map keyed
	// by a fixed-size integer keeps lookups free of allocations; the rare key
	// whose hash is taken by another key lives in collided.
	byHash   *xsync.Map[uint64, *Window]
	collided collisions
	// perWorkspace counts each workspace's windows, to hold it to
	// maxPerWorkspace: one tenant sending endless distinct identifiers must
	// not take the memory every other tenant's decisions need.
	perWorkspace    *xsync.Map[string, *atomic.Int64]
	maxPerWorkspace int64
	// full is what a request for a window past its workspace's cap gets.
	full error
	// counters count the windows made, removed and refused.
	counters Counters
	// beside is told of every window filed and removed.
	beside Companion
	// JanitorNow is the latest clock reading (unix ms) at which the
	// janitor removed idle windows.
	JanitorNow atomic.Int64
}

// Counters are the metrics a cell table keeps.
type Counters struct {
	// Created counts the windows a request made; evicted those the
	// janitor removed; rejected the requests refused a window by the cap.
	Created, Evicted, Rejected prometheus.Counter
}

// A companion keeps state beside some of a table's windows (a model's
// level, a tier's writers, a group of windows) and is told when a window
// is filed and removed, so that the table need know none of it.
type Companion interface {
	// Filed is told of each window the table makes, once it is in the
	// table: it files the window in its groups.
	Filed(w *Window)
	// Keeps reports whether w must stay at now (unix ms) though its
	// cells are idle: state beside it that no store holds.
	Keeps(w *Window, now int64) bool
	// Forgot is told of each window the janitor removed: it drops what
	// it keeps beside it.
	Forgot(w *Window)
}

// collisions holds the windows whose hash another key already owns in the
// main map. With 64-bit hashes this practically never holds anything; it
// exists so that correctness never rests on luck.
type collisions struct {
	mu sync.Mutex
	m  map[Key]*Window
}

// Init readies an empty table, which holds at most maxPerWorkspace windows
// of a workspace and answers full for one more. A table is not copied
// once in use.
func (t *Table) Init(maxPerWorkspace int64, full error, counters Counters, beside Companion) {
	t.seed = maphash.MakeSeed()
	t.HashKey = Key.Hash
	t.byHash = xsync.NewMap[uint64, *Window]()
	t.perWorkspace = xsync.NewMap[string, *atomic.Int64]()
	t.maxPerWorkspace = maxPerWorkspace
	t.full = full
	t.counters = counters
	t.beside = beside
}

// Len returns the number of windows held.
func (t *Table) Len() int {
	t.collided.mu.Lock()
	n := len(t.collided.m)
	t.collided.mu.Unlock()
	return t.byHash.Size() + n
}

// ForRequest returns the window of k for a request, creating it on first
// use. It returns the table's full error when creating it would take k's
// workspace past its cap.
func (t *Table) ForRequest(k *Key) (*Window, error) {
	h := t.HashKey(*k, t.seed)
	if w, ok := t.byHash.Load(h); ok && w.Is(k) {
		return w, nil
	}
	w, created, err := t.loadOrCreate(k, h)
	if err != nil {
		t.counters.Rejected.Inc()
		return nil, err
	}
	if created {
		t.counters.Created.Inc()
	}
	return w, nil
}

// Find returns the window of k, or nil if the process holds none.
func (t *Table) Find(k *Key) *Window {
	h := t.HashKey(*k, t.seed)
	if w, ok := t.byHash.Load(h); ok {
		if w.Is(k) {
			return w
		}
		t.collided.mu.Lock()
		defer t.collided.mu.Unlock()
		return t.collided.m[*k]
	}
	return nil
}

// ForEach calls f for every window held.
func (t *Table) ForEach(f func(*Window)) {
	t.byHash.Range(func(_ uint64, w *Window) bool {
		f(w)
		return true
	})
	t.collided.mu.Lock()
	collided := make([]*Window, 0, len(t.collided.m))
	for _, w := range t.collided.m {
		collided = append(collided, w)
	}
	t.collided.mu.Unlock()
	for _, w := range collided {
		f(w)
	}
}

// FindOrCreate returns the window of k, creating it within the
// workspace's cap, and reports whether it created it.
func (t *Table) FindOrCreate(k *Key) (*Window, bool, error) {
	return t.loadOrCreate(k, t.HashKey(*k, t.seed))
}

// loadOrCreate is the slow path of ForRequest: the key is new, or its hash
// is owned by another key. It reports whether it created the window, and
// creates none past the workspace's cap.
func (t *Table) loadOrCreate(k *Key, h uint64) (*Window, bool, error) {
	var created *Window
	full := false
	w, _ := t.byHash.Compute(h, func(old *Window, loaded bool) (*Window, xsync.ComputeOp) {
		if loaded {
			return old, xsync.CancelOp
		}
		if !t.reserve(k) {
			full = true
			return nil, xsync.CancelOp
		}
		created = NewWindow(k)
		return created, xsync.UpdateOp
	})
	if created != nil {
		t.beside.Filed(created)
	}
	if full {
		return nil, false, t.full
	}
	if w.Is(k) {
		return w, w == created, nil
	}
	t.collided.mu.Lock()
	if w, ok := t.collided.m[*k]; ok {
		t.collided.mu.Unlock()
		return w, false, nil
	}
	if !t.reserve(k) {
		t.collided.mu.Unlock()
		return nil, false, t.full
	}
	if t.collided.m == nil {
		t.collided.m = make(map[Key]*Window)
	}
	w = NewWindow(k)
	t.collided.m[*k] = w
	t.collided.mu.Unlock()
	t.beside.Filed(w) // outside the lock: filing looks other windows up
	return w, true, nil
}

// reserve counts one more window for workspace and reports whether it fits
// under the cap; if not, nothing is counted.
func (t *Table) reserve(k *Key) bool {
	if k.Refunds {
		// A key's refunds window is not counted: there is at most one for
		// each window the cap admitted (two for a token bucket's: its
		// seed, and the tokens given back to it), and a refund must never
		// be turned away after its reservation was counted.
		return true
	}
	n, _ := t.perWorkspace.LoadOrCompute(k.Workspace, func() (*atomic.Int64, bool) {
		return new(atomic.Int64), false
	})
	if n.Add(1) > t.maxPerWorkspace {
		n.Add(-1)
		return false
	}
	return true
}

// release counts one window of k's workspace fewer: the janitor removed it.
func (t *Table) release(k Key) {
	if k.Refunds {
		return // never counted (see reserve)
	}
	if n, ok := t.perWorkspace.Load(k.Workspace); ok {
		n.Add(-1)
	}
}

// CellOrder returns the indices of w's cells, the older first.
func (w *Window) CellOrder() [2]int {
	a, b := w.Cells[0].Load(), w.Cells[1].Load()
	if a != nil && b != nil && a.Seq() > b.Seq() {
		return [2]int{1, 0}
	}
	return [2]int{0, 1}
}

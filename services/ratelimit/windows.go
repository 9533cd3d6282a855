package ratelimit

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/puzpuzpuz/xsync/v4"
)

// cellTable holds every window of the process, by key, and each
// workspace's share of them. It knows no model and no tier: what they
// keep beside a window, its companion is told of (see companion). Its
// methods are safe for concurrent use.
type cellTable struct {
	seed    maphash.Seed
	hashKey func(k windowKey, seed maphash.Seed) uint64 // tests force collisions
	// byHash maps a key's hash to its window. A generic lock-free map keyed
	// by a fixed-size integer keeps lookups free of allocations; the rare key
	// whose hash is taken by another key lives in collided.
	byHash   *xsync.Map[uint64, *window]
	collided collisions
	// perWorkspace counts each workspace's windows, to hold it to
	// maxPerWorkspace: one tenant sending endless distinct identifiers must
	// not take the memory every other tenant's decisions need.
	perWorkspace    *xsync.Map[string, *atomic.Int64]
	maxPerWorkspace int64
	// full is what a request for a window past its workspace's cap gets.
	full error
	// counters count the windows made, removed and refused.
	counters tableCounters
	// beside is told of every window filed and removed.
	beside companion
	// janitorNow is the latest clock reading (unix ms) at which the
	// janitor removed idle windows.
	janitorNow atomic.Int64
}

// tableCounters are the metrics a cell table keeps.
type tableCounters struct {
	// created counts the windows a request made; evicted those the
	// janitor removed; rejected the requests refused a window by the cap.
	created, evicted, rejected prometheus.Counter
}

// A companion keeps state beside some of a table's windows (a model's
// level, a tier's writers, a group of windows) and is told when a window
// is filed and removed, so that the table need know none of it.
type companion interface {
	// filed is told of each window the table makes, once it is in the
	// table: it files the window in its groups.
	filed(w *window)
	// keeps reports whether w must stay at now (unix ms) though its
	// cells are idle: state beside it that no store holds.
	keeps(w *window, now int64) bool
	// forgot is told of each window the janitor removed: it drops what
	// it keeps beside it.
	forgot(w *window)
}

// collisions holds the windows whose hash another key already owns in the
// main map. With 64-bit hashes this practically never holds anything; it
// exists so that correctness never rests on luck.
type collisions struct {
	mu sync.Mutex
	m  map[windowKey]*window
}

// init readies an empty table, which holds at most maxPerWorkspace windows
// of a workspace and answers full for one more. A table is not copied
// once in use.
func (t *cellTable) init(maxPerWorkspace int64, full error, counters tableCounters, beside companion) {
	t.seed = maphash.MakeSeed()
	t.hashKey = windowKey.hash
	t.byHash = xsync.NewMap[uint64, *window]()
	t.perWorkspace = xsync.NewMap[string, *atomic.Int64]()
	t.maxPerWorkspace = maxPerWorkspace
	t.full = full
	t.counters = counters
	t.beside = beside
}

// len returns the number of windows held.
func (t *cellTable) len() int {
	t.collided.mu.Lock()
	n := len(t.collided.m)
	t.collided.mu.Unlock()
	return t.byHash.Size() + n
}

// forRequest returns the window of k for a request, creating it on first
// use. It returns the table's full error when creating it would take k's
// workspace past its cap.
func (t *cellTable) forRequest(k *windowKey) (*window, error) {
	h := t.hashKey(*k, t.seed)
	if w, ok := t.byHash.Load(h); ok && w.is(k) {
		return w, nil
	}
	w, created, err := t.loadOrCreate(k, h)
	if err != nil {
		t.counters.rejected.Inc()
		return nil, err
	}
	if created {
		t.counters.created.Inc()
	}
	return w, nil
}

// find returns the window of k, or nil if the process holds none.
func (t *cellTable) find(k *windowKey) *window {
	h := t.hashKey(*k, t.seed)
	if w, ok := t.byHash.Load(h); ok {
		if w.is(k) {
			return w
		}
		t.collided.mu.Lock()
		defer t.collided.mu.Unlock()
		return t.collided.m[*k]
	}
	return nil
}

// forEach calls f for every window held.
func (t *cellTable) forEach(f func(*window)) {
	t.byHash.Range(func(_ uint64, w *window) bool {
		f(w)
		return true
	})
	t.collided.mu.Lock()
	collided := make([]*window, 0, len(t.collided.m))
	for _, w := range t.collided.m {
		collided = append(collided, w)
	}
	t.collided.mu.Unlock()
	for _, w := range collided {
		f(w)
	}
}

// findOrCreate returns the window of k, creating it within the
// workspace's cap, and reports whether it created it.
func (t *cellTable) findOrCreate(k *windowKey) (*window, bool, error) {
	return t.loadOrCreate(k, t.hashKey(*k, t.seed))
}

// loadOrCreate is the slow path of forRequest: the key is new, or its hash
// is owned by another key. It reports whether it created the window, and
// creates none past the workspace's cap.
func (t *cellTable) loadOrCreate(k *windowKey, h uint64) (*window, bool, error) {
	var created *window
	full := false
	w, _ := t.byHash.Compute(h, func(old *window, loaded bool) (*window, xsync.ComputeOp) {
		if loaded {
			return old, xsync.CancelOp
		}
		if !t.reserve(k) {
			full = true
			return nil, xsync.CancelOp
		}
		created = newWindow(k)
		return created, xsync.UpdateOp
	})
	if created != nil {
		t.beside.filed(created)
	}
	if full {
		return nil, false, t.full
	}
	if w.is(k) {
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
		t.collided.m = make(map[windowKey]*window)
	}
	w = newWindow(k)
	t.collided.m[*k] = w
	t.collided.mu.Unlock()
	t.beside.filed(w) // outside the lock: filing looks other windows up
	return w, true, nil
}

// reserve counts one more window for workspace and reports whether it fits
// under the cap; if not, nothing is counted.
func (t *cellTable) reserve(k *windowKey) bool {
	if k.refunds {
		// A key's refunds window is not counted: there is at most one for
		// each window the cap admitted, and a refund must never be turned
		// away after its reservation was counted.
		return true
	}
	n, _ := t.perWorkspace.LoadOrCompute(k.workspace, func() (*atomic.Int64, bool) {
		return new(atomic.Int64), false
	})
	if n.Add(1) > t.maxPerWorkspace {
		n.Add(-1)
		return false
	}
	return true
}

// release counts one window of k's workspace fewer: the janitor removed it.
func (t *cellTable) release(k windowKey) {
	if k.refunds {
		return // never counted (see reserve)
	}
	if n, ok := t.perWorkspace.Load(k.workspace); ok {
		n.Add(-1)
	}
}

// cellOrder returns the indices of w's cells, the older first.
func (w *window) cellOrder() [2]int {
	a, b := w.cells[0].Load(), w.cells[1].Load()
	if a != nil && b != nil && a.seq() > b.seq() {
		return [2]int{1, 0}
	}
	return [2]int{0, 1}
}

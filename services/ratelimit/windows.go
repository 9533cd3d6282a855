package ratelimit

import (
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// windowTable holds every window of the process, by key, and each
// workspace's share of them. Its methods are safe for concurrent use.
type windowTable struct {
	metrics *metrics

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
	// buckets holds the state of each window decided as a token bucket:
	// beside the window rather than in it, so that the windows of the
	// other models, nearly all of them, do not carry its pointer (a
	// window is 72 bytes, in the 80-byte size class). bucketIDs holds the
	// same buckets by identity: the windows of one bucket's cell lengths
	// share it.
	buckets   *xsync.Map[*window, *bucket]
	bucketIDs *xsync.Map[bucketID, *bucket]
	// given holds, for each window whose cells this process writes as
	// totals (refunds, slots), what it wrote into each of its two cells in
	// all (see giveBack): beside the window, as buckets are, so that no
	// cell grows a field. writers numbers their names (see givenBack and
	// takeLanes).
	writers atomic.Uint64
	given   *xsync.Map[*window, *givenBack]
	// lanes holds, for each concurrency limit's window this process took
	// slots of in the regional store, the writers it took them as (see
	// takeLanes).
	lanes *xsync.Map[*window, *takeLanes]
	// zones groups the calendar windows of one identity and unit by time
	// zone (see zones.go).
	zones zones
	// pools groups the windows of a concurrency limit's cells by limit
	// (see pool.go).
	pools pools
	// janitorNow is the latest clock reading (unix ms) at which the
	// janitor removed idle windows.
	janitorNow atomic.Int64
}

// givenBack is what this process wrote into the two cells of one window
// whose cells are written as totals (refunds; a concurrency limit's
// slots) so far, by sequence, and what the store acknowledged of it.
type givenBack struct {
	// name is the writer's name within the process: one per window
	// object, so that a window the janitor removed and another request
	// made again writes as another writer, whose total starts from zero
	// beside the old one's rather than under it.
	name string
	mu   sync.Mutex
	cellTotals
}

// giveBack adds amount (0 or more) to what this process wrote into w's
// cell seq, and returns the writer's name and the new total: what a write
// of the cell to the regional store carries (see store.Increment.Writer).
func (t *windowTable) giveBack(w *window, seq, amount int64) (string, int64) {
	g := t.givenOf(w)
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.name, g.add(seq, amount)
}

// givenOf returns w's totals, made on first use with a name of their own.
func (t *windowTable) givenOf(w *window) *givenBack {
	g, _ := t.given.LoadOrCompute(w, func() (*givenBack, bool) {
		return &givenBack{name: "g" + strconv.FormatUint(t.writers.Add(1), 10)}, false
	})
	return g
}

// acked records that the store holds total of w's cell seq.
func (t *windowTable) acked(w *window, seq, total int64) {
	g, ok := t.given.Load(w)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ack(seq, total)
}

// unacked returns what this process wrote into w's cell seq that the
// store has not acknowledged: a write that failed and waits for the
// replay, which the store may not hold.
func (t *windowTable) unacked(w *window, seq int64) int64 {
	g, ok := t.given.Load(w)
	if !ok {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cellTotals.unacked(seq)
}

// bucketID names a token bucket's state: its identity, whatever its rate,
// burst and unit, and so whatever the length of its cells.
type bucketID struct {
	workspace, namespace, identifier string
}

// bucketIDOf returns the identity of w's bucket.
func bucketIDOf(w *window) bucketID {
	k := w.key()
	return bucketID{k.workspace, k.namespace, k.identifier}
}

// collisions holds the windows whose hash another key already owns in the
// main map. With 64-bit hashes this practically never holds anything; it
// exists so that correctness never rests on luck.
type collisions struct {
	mu sync.Mutex
	m  map[windowKey]*window
}

// init readies an empty table. A table is not copied once in use.
func (t *windowTable) init(m *metrics, maxPerWorkspace int64) {
	t.metrics = m
	t.seed = maphash.MakeSeed()
	t.hashKey = windowKey.hash
	t.byHash = xsync.NewMap[uint64, *window]()
	t.perWorkspace = xsync.NewMap[string, *atomic.Int64]()
	t.maxPerWorkspace = maxPerWorkspace
	t.buckets = xsync.NewMap[*window, *bucket]()
	t.bucketIDs = xsync.NewMap[bucketID, *bucket]()
	t.given = xsync.NewMap[*window, *givenBack]()
	t.lanes = xsync.NewMap[*window, *takeLanes]()
	t.zones.groups = xsync.NewMap[zoneID, *zoneGroup]()
	t.pools.groups = xsync.NewMap[poolID, *poolGroup]()
	t.pools.byWindow = xsync.NewMap[*window, *poolGroup]()
}

// bucketOf returns w's bucket, the one of w's identity, at now (unix ms),
// making it on first use at sp's rate, and reports whether w attached the
// bucket that the identity's other windows held until now (its cells
// changed length). A bucket made takes what w's cells already hold (see
// arrival) and their seed (see Service.seedBucket), as if owed at once: a
// cold read errs strict. A bucket attached keeps the emptier of what it
// knew and the seed (which another process that moved first left with
// what it owed, itself included) and takes what w's cells count, which
// this process has not seen: admissions there since the first process
// moved.
func (t *windowTable) bucketOf(w *window, sp spec, now int64) (b *bucket, attached bool) {
	if b, ok := t.buckets.Load(w); ok {
		return b, false
	}
	id := bucketIDOf(w)
	b, _ = t.bucketIDs.Compute(id, func(old *bucket, loaded bool) (*bucket, xsync.ComputeOp) {
		if loaded {
			old.refs.Add(1)
			attached = true
			return old, xsync.CancelOp
		}
		b := &bucket{}
		b.init(sp)
		b.refs.Store(1)
		return b, xsync.UpdateOp
	})
	var seen [2]struct {
		c *cell
		n int64
	}
	held, loaded := t.buckets.LoadOrCompute(w, func() (*bucket, bool) {
		if seed := t.seedOf(w, now); seed > 0 {
			owed := &bucket{}
			owed.init(spec{limit: b.limit.Load(), durationMs: b.durMs.Load(), burst: b.burst.Load()})
			owed.take(seed, now*int64(time.Millisecond))
			atomicMax(&b.tat, owed.tat.Load())
		}
		for _, i := range w.cellOrder() {
			if c := w.cells[i].Load(); c != nil {
				seen[i].c, seen[i].n = c, c.count.Load()+c.global.Load()
				b.take(seen[i].n, arrival(w, c, now))
			}
		}
		return b, false
	})
	if loaded {
		// Another decision gave w its bucket first: the same one.
		t.unref(id, b)
		return held, false
	}
	b.mu.Lock()
	b.windows = append(b.windows, w)
	b.mu.Unlock()
	// A tier that raised a cell while the bucket was being given to w
	// found no bucket to take it from: take it now.
	for _, s := range seen {
		if s.c != nil {
			if n := s.c.count.Load() + s.c.global.Load(); n > s.n {
				b.take(n-s.n, arrival(w, s.c, now))
			}
		}
	}
	if w.evicted() {
		// The janitor removed w meanwhile, and may have dropped its
		// bucket before this one was given: nothing else would.
		t.dropBucket(w)
	}
	return b, attached
}

// seedOf returns the largest seed left beside w's cells of now (unix ms)
// and the one before (see Service.seedBucket), this region's or the sum
// of the others'.
func (t *windowTable) seedOf(w *window, now int64) int64 {
	cur, prev := t.refundCells(w, w.seqOf(now))
	var seed int64
	for _, c := range []*cell{cur, prev} {
		if c != nil {
			seed = max(seed, c.count.Load(), c.global.Load())
		}
	}
	return seed
}

// dropBucket forgets w's bucket, and the identity's bucket with its last
// window: the janitor removed w.
func (t *windowTable) dropBucket(w *window) {
	if b, ok := t.buckets.LoadAndDelete(w); ok {
		b.mu.Lock()
		b.windows = slices.DeleteFunc(b.windows, func(o *window) bool { return o == w })
		b.mu.Unlock()
		t.unref(bucketIDOf(w), b)
	}
}

// unref counts one window fewer holding b, the bucket of id, and forgets
// b with the last.
func (t *windowTable) unref(id bucketID, b *bucket) {
	t.bucketIDs.Compute(id, func(old *bucket, loaded bool) (*bucket, xsync.ComputeOp) {
		if loaded && old == b && b.refs.Add(-1) <= 0 {
			return nil, xsync.DeleteOp
		}
		return old, xsync.CancelOp
	})
}

// len returns the number of windows held.
func (t *windowTable) len() int {
	t.collided.mu.Lock()
	n := len(t.collided.m)
	t.collided.mu.Unlock()
	return t.byHash.Size() + n
}

// forRequest returns the window of k for a request, creating it on first
// use. It returns a [*CapacityError] when creating it would take k's
// workspace past its cap.
func (t *windowTable) forRequest(k *windowKey) (*window, error) {
	h := t.hashKey(*k, t.seed)
	if w, ok := t.byHash.Load(h); ok && w.is(k) {
		return w, nil
	}
	w, created, err := t.loadOrCreate(k, h)
	if err != nil {
		t.metrics.windowsRejected.WithLabelValues("request").Inc()
		return nil, err
	}
	if created {
		t.metrics.windowsCreated.Inc()
	}
	return w, nil
}

// find returns the window of k, or nil if the process holds none.
func (t *windowTable) find(k *windowKey) *window {
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
func (t *windowTable) forEach(f func(*window)) {
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
func (t *windowTable) findOrCreate(k *windowKey) (*window, bool, error) {
	return t.loadOrCreate(k, t.hashKey(*k, t.seed))
}

// loadOrCreate is the slow path of forRequest: the key is new, or its hash
// is owned by another key. It reports whether it created the window, and
// creates none past the workspace's cap.
func (t *windowTable) loadOrCreate(k *windowKey, h uint64) (*window, bool, error) {
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
		t.file(created)
	}
	if full {
		return nil, false, &CapacityError{Max: t.maxPerWorkspace}
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
		return nil, false, &CapacityError{Max: t.maxPerWorkspace}
	}
	if t.collided.m == nil {
		t.collided.m = make(map[windowKey]*window)
	}
	w = newWindow(k)
	t.collided.m[*k] = w
	t.collided.mu.Unlock()
	t.file(w) // outside the lock: filing looks other windows up
	return w, true, nil
}

// file files w, new in the table, in its group: a calendar's zones, a
// concurrency limit's pool.
func (t *windowTable) file(w *window) {
	switch k := w.key(); {
	case w.period().Kind() == period.Pool:
		// The other window of the cell (its releases', or the cell's),
		// looked up while the pool is held: a pair made at once is
		// filed together whichever comes second.
		k.refunds = !k.refunds
		t.pools.add(w, func() *window { return t.find(&k) })
	case w.period().Kind() == period.Calendar && !w.holdsRefunds():
		t.zones.add(w)
	}
}

// reserve counts one more window for workspace and reports whether it fits
// under the cap; if not, nothing is counted.
func (t *windowTable) reserve(k *windowKey) bool {
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
func (t *windowTable) release(k windowKey) {
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

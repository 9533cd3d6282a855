package model

import (
	"slices"
	"time"

	"github.com/puzpuzpuz/xsync/v4"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
)

// bucketID names a token bucket's state: its identity, whatever its rate,
// burst and unit, and so whatever the length of its cells.
type bucketID struct {
	workspace, namespace, identifier string
}

// bucketIDOf returns the identity of w's bucket.
func bucketIDOf(w *cells.Window) bucketID {
	k := w.Key()
	return bucketID{k.Workspace, k.Namespace, k.Identifier}
}

// bucketOf returns w's bucket, the one of w's identity, at now (unix ms),
// making it on first use at sp's rate, and reports whether w attached the
// bucket that the identity's other windows held until now (its cells
// changed length). A bucket made takes what w's cells already hold (see
// arrival) and their seed (see Table.seedBucket), as if owed at once (a
// cold read errs strict), and takes back what was given back of them
// (see Table.SettleGiven). A bucket attached keeps the emptier of what it
// knew and the seed (which another process that moved first left with
// what it owed, itself included) and takes what w's cells count, which
// this process has not seen: admissions there since the first process
// moved.
func (t *Table) bucketOf(w *cells.Window, sp Spec, now int64) (b *Bucket, attached bool) {
	if b, ok := t.buckets.Load(w); ok {
		return b, false
	}
	id := bucketIDOf(w)
	b, _ = t.bucketIDs.Compute(id, func(old *Bucket, loaded bool) (*Bucket, xsync.ComputeOp) {
		if loaded {
			old.refs.Add(1)
			attached = true
			return old, xsync.CancelOp
		}
		b := &Bucket{}
		b.init(sp)
		b.refs.Store(1)
		return b, xsync.UpdateOp
	})
	var seen [2]struct {
		c *cells.Cell
		n int64
	}
	held, loaded := t.buckets.LoadOrCompute(w, func() (*Bucket, bool) {
		if seed := t.seedOf(w, now); seed > 0 {
			owed := &Bucket{}
			owed.init(Spec{Limit: b.limit.Load(), DurationMs: b.durMs.Load(), Burst: b.burst.Load()})
			owed.take(seed, now*int64(time.Millisecond))
			cells.AtomicMax(&b.tat, owed.tat.Load())
		}
		for _, i := range w.CellOrder() {
			if c := w.Cells[i].Load(); c != nil {
				seen[i].c, seen[i].n = c, c.Count.Load()+c.Global.Load()
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
			if n := s.c.Count.Load() + s.c.Global.Load(); n > s.n {
				b.take(n-s.n, arrival(w, s.c, now))
			}
		}
	}
	// What was given back of the bucket, taken back after what was
	// taken (see SettleGiven; settled once, however often seen).
	gk := w.GivenKey()
	if gw := t.Find(&gk); gw != nil {
		for _, i := range gw.CellOrder() {
			if c := gw.Cells[i].Load(); c != nil {
				b.settle(gk.Period.Code(), c, now)
			}
		}
	}
	if w.Evicted() {
		// The janitor removed w meanwhile, and may have dropped its
		// bucket before this one was given: nothing else would.
		t.dropBucket(w)
	}
	return b, attached
}

// seedOf returns the largest seed left beside w's cells of now (unix ms)
// and the one before (see Table.seedBucket), this region's or the sum
// of the others'.
func (t *Table) seedOf(w *cells.Window, now int64) int64 {
	cur, prev := t.refundCells(w, w.SeqOf(now))
	var seed int64
	for _, c := range []*cells.Cell{cur, prev} {
		if c != nil {
			seed = max(seed, c.Count.Load(), c.Global.Load())
		}
	}
	return seed
}

// dropBucket forgets w's bucket, and the identity's bucket with its last
// window: the janitor removed w.
func (t *Table) dropBucket(w *cells.Window) {
	if b, ok := t.buckets.LoadAndDelete(w); ok {
		b.mu.Lock()
		b.windows = slices.DeleteFunc(b.windows, func(o *cells.Window) bool { return o == w })
		b.mu.Unlock()
		t.unref(bucketIDOf(w), b)
	}
}

// unref counts one window fewer holding b, the bucket of id, and forgets
// b with the last.
func (t *Table) unref(id bucketID, b *Bucket) {
	t.bucketIDs.Compute(id, func(old *Bucket, loaded bool) (*Bucket, xsync.ComputeOp) {
		if loaded && old == b && b.refs.Add(-1) <= 0 {
			return nil, xsync.DeleteOp
		}
		return old, xsync.CancelOp
	})
}

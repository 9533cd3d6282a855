package cells

import (
	"time"

	"github.com/puzpuzpuz/xsync/v4"
)

// EvictIdle removes every window none of whose cells can affect a decision at
// now, and returns how many it removed.
//
// A request may be counting into a window while it is removed. The janitor
// marks the window evicted first and checks it is still idle after; a request
// checks the mark after counting and, if set, takes its count back and decides
// again. One of the two always sees the other, so no count is lost.
func (t *Table) EvictIdle(now time.Time) int {
	ms := now.UnixMilli()
	// Before any window goes: a decision that finds its window after this
	// knows its own clock reading may be older (see Service.Decide).
	AtomicMax(&t.JanitorNow, ms)
	evicted := 0
	t.byHash.Range(func(h uint64, w *Window) bool {
		if t.beside.Keeps(w, ms) {
			return true
		}
		if w.evict(ms) {
			t.byHash.Compute(h, func(old *Window, loaded bool) (*Window, xsync.ComputeOp) {
				if loaded && old == w {
					return nil, xsync.DeleteOp
				}
				return old, xsync.CancelOp
			})
			t.release(w.Key())
			t.beside.Forgot(w)
			evicted++
		}
		return true
	})
	t.collided.mu.Lock()
	for k, w := range t.collided.m {
		if !t.beside.Keeps(w, ms) && w.evict(ms) {
			delete(t.collided.m, k)
			t.release(k)
			t.beside.Forgot(w)
			evicted++
		}
	}
	t.collided.mu.Unlock()
	t.counters.Evicted.Add(float64(evicted))
	return evicted
}

// evict marks w evicted if it is idle at now (unix ms) and reports whether it
// did.
func (w *Window) evict(now int64) bool {
	oldest := w.Period().Oldest(now)
	if !w.Idle(oldest) {
		return false
	}
	w.SetEvicted(true)
	if !w.Idle(oldest) {
		w.SetEvicted(false)
		return false
	}
	return true
}

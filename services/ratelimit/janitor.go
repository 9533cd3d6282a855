package ratelimit

import (
	"context"
	"time"

	"github.com/puzpuzpuz/xsync/v4"
)

// janitorInterval is how often idle windows are evicted. A window is idle
// once both its cells are older than the previous fixed window, so with the
// shortest window of 1 s an idle window lingers at most 2 s + 10 s (a
// calendar's once it holds no cell of the current period; a token bucket's
// not before it is full again, since no store holds its level). A walk
// reads each window once without locking the map as a whole: a request
// waits at most for the removal of one idle window in its bucket.
const janitorInterval = 10 * time.Second

// runJanitor evicts idle windows every interval until ctx is done.
func (s *Service) runJanitor(ctx context.Context) {
	t := time.NewTicker(s.janitorEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.windows.evictIdle(s.clock.Now())
		}
	}
}

// evictIdle removes every window none of whose cells can affect a decision at
// now, and returns how many it removed.
//
// A request may be counting into a window while it is removed. The janitor
// marks the window evicted first and checks it is still idle after; a request
// checks the mark after counting and, if set, takes its count back and decides
// again. One of the two always sees the other, so no count is lost.
func (t *cellTable) evictIdle(now time.Time) int {
	ms := now.UnixMilli()
	// Before any window goes: a decision that finds its window after this
	// knows its own clock reading may be older (see Service.Decide).
	atomicMax(&t.janitorNow, ms)
	evicted := 0
	t.byHash.Range(func(h uint64, w *window) bool {
		if t.beside.keeps(w, ms) {
			return true
		}
		if w.evict(ms) {
			t.byHash.Compute(h, func(old *window, loaded bool) (*window, xsync.ComputeOp) {
				if loaded && old == w {
					return nil, xsync.DeleteOp
				}
				return old, xsync.CancelOp
			})
			t.release(w.key())
			t.beside.forgot(w)
			evicted++
		}
		return true
	})
	t.collided.mu.Lock()
	for k, w := range t.collided.m {
		if !t.beside.keeps(w, ms) && w.evict(ms) {
			delete(t.collided.m, k)
			t.release(k)
			t.beside.forgot(w)
			evicted++
		}
	}
	t.collided.mu.Unlock()
	t.counters.evicted.Add(float64(evicted))
	return evicted
}

// evict marks w evicted if it is idle at now (unix ms) and reports whether it
// did.
func (w *window) evict(now int64) bool {
	oldest := w.period().Oldest(now)
	if !w.idle(oldest) {
		return false
	}
	w.setEvicted(true)
	if !w.idle(oldest) {
		w.setEvicted(false)
		return false
	}
	return true
}

package ratelimit

// The batch protocol of an all-or-nothing MultiLimit (Service.DecideAll):
// each of its limits adds its cost to its cell speculatively while the
// limits after it are decided, and the batch then commits every increment
// or rolls every one back. Each change of both the count and the
// speculative count is a transition of the window's state, bracketed so
// that a reader of the committed count (the regional replay, the global
// flush) never sees a torn pair: see window.state and committed.

// beginTransition and endTransition bracket a change of both count and
// speculative by a batch, so that committed can tell a torn read.
func (w *window) beginTransition() { w.state.Add(transitionStep) }
func (w *window) endTransition()   { w.state.Add(^uint64(0)) } // one fewer in progress

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

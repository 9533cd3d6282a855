package cells

// The batch protocol of an all-or-nothing MultiLimit (Service.DecideAll):
// each of its limits adds its cost to its cell speculatively while the
// limits after it are decided, and the batch then commits every increment
// or rolls every one back. Each change of both the count and the
// speculative count is a transition of the window's state, bracketed so
// that a reader of the committed count (the regional replay, the global
// flush) never sees a torn pair: see Window.state and Committed.

// BeginTransition and EndTransition bracket a change of both count and
// speculative by a batch, so that Committed can tell a torn read.
func (w *Window) BeginTransition() { w.state.Add(transitionStep) }
func (w *Window) EndTransition()   { w.state.Add(^uint64(0)) } // one fewer in progress

// Committed returns c's regional count without speculative batch increments,
// and false when batches kept changing the cell during every attempt to read
// a consistent pair (the caller tries again later).
func (w *Window) Committed(c *Cell) (int64, bool) {
	for range 8 {
		before := w.state.Load()
		if before&stateInProgress != 0 {
			continue
		}
		n := c.Count.Load()
		s := c.Speculative.Load()
		if w.state.Load()&stateBegun == before&stateBegun {
			return n - s, true
		}
	}
	return 0, false
}

// ApplySpeculative adds cost to c's count if it still is n, and records it
// as speculative. It reports whether the count changed.
func (w *Window) ApplySpeculative(c *Cell, n, cost int64) bool {
	w.BeginTransition()
	defer w.EndTransition()
	c.Speculative.Add(cost)
	if c.Count.CompareAndSwap(n, n+cost) {
		return true
	}
	c.Speculative.Add(-cost)
	return false
}

// Rollback takes back a speculative increment of cost on c.
func (w *Window) Rollback(c *Cell, cost int64) {
	w.BeginTransition()
	defer w.EndTransition()
	c.Count.Add(-cost)
	c.Speculative.Add(-cost)
}

// Commit makes a speculative increment of cost on c final. One atomic step,
// so readers of committed never see it torn.
func (w *Window) Commit(c *Cell, cost int64) {
	c.Speculative.Add(-cost)
}

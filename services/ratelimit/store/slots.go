package store

import (
	"context"
	"time"
)

// SlotTaker is implemented by a regional store that can take the slots of
// a concurrency limit in one atomic step: what the processes of a region
// hold is then never more than the limit, where counts replayed a few
// milliseconds late would let each process take the same free slots. The
// limiter takes slots through it when the store has it, and decides from
// local state, as for every other limit, when it fails.
type SlotTaker interface {
	// TakeSlots counts Cost into cell Key if what is held leaves room for
	// it under Limit, and answers what the store holds afterwards. What is
	// held is the cell's count and the count of the cell before it (the
	// one of Sequence-1), each less its refunds (never below zero), less
	// Freed (never below zero), plus Others. It keeps a cell it counts into for at least TTL.
	TakeSlots(ctx context.Context, t SlotTake) (SlotCounts, error)
}

// SlotTake asks for slots: see [SlotTaker].
type SlotTake struct {
	// Key is the cell the slots are counted in (never a refunds cell).
	Key CellKey
	// Cost is how many slots, Limit how many may be held.
	Cost, Limit int64
	// Others is what is held beyond what the store holds: the other
	// regions' slots, as far as the caller knows, and those the caller
	// took while the store failed and has not sent yet.
	Others int64
	// Freed is what the caller released of the two cells that the store
	// has not been sent yet (refunds it replays in the background): taken
	// off what the store holds, so that the caller's own releases free
	// their slots for it at once.
	Freed int64
	// TTL is how long the store must keep the cell if it counts into it.
	TTL time.Duration
}

// SlotCounts is what a store holds of a concurrency limit's two cells
// after a [SlotTaker.TakeSlots].
type SlotCounts struct {
	// Taken reports whether the slots were counted.
	Taken bool
	// Cur and Prev are the counts of the cell and of the one before it;
	// CurRefunds and PrevRefunds their refunds.
	Cur, Prev, CurRefunds, PrevRefunds int64
}

// Held returns what the two cells hold, each less its refunds.
func (c SlotCounts) Held() int64 {
	return max(c.Cur-c.CurRefunds, 0) + max(c.Prev-c.PrevRefunds, 0)
}

// SlotKeys returns the keys TakeSlots reads, in order: the cell of k, the
// cell before it, and their refunds.
func SlotKeys(k CellKey) [4]CellKey {
	prev := k
	prev.Sequence--
	curR, prevR := k, prev
	curR.Refunds, prevR.Refunds = true, true
	return [4]CellKey{k, prev, curR, prevR}
}

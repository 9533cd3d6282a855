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
	// held is, for the cell and for the one before it (of Sequence-1), its
	// count less its refunds plus what the caller adds to it (Beyond),
	// never below zero, summed. It keeps a cell it counts into for at
	// least TTL.
	//
	// A take is idempotent: it counts into the cell as Writer's Total, as
	// an [Increment] with a Writer does (the cell holds the sum of its
	// writers' totals), and a take whose Total the store already holds for
	// Writer was applied before (its answer was lost): it is answered
	// taken again and counts nothing. So a take sent twice, or applied and
	// then timed out and followed by a write of the same total, counts its
	// slots once. What the take adds is Total less what the store holds
	// for Writer (Cost, when the writer's earlier takes were all applied),
	// and the limit is checked with all of it.
	TakeSlots(ctx context.Context, t SlotTake) (SlotCounts, error)
}

// SlotTake asks for slots: see [SlotTaker].
type SlotTake struct {
	// Key is the cell the slots are counted in (never a refunds cell).
	Key CellKey
	// Cost is how many slots, Limit how many may be held.
	Cost, Limit int64
	// Beyond is what is held beyond what the store holds, in the cell of
	// Key and in the one before: the other regions' slots less their
	// releases, as far as the caller knows, and the caller's slots and
	// releases that the store has not been sent yet. It may be negative:
	// a release answered in another region (or by the caller, and not
	// sent yet) of a slot counted here frees it here. Each cell is
	// summed over the regions before it is clamped at zero, so that a
	// release frees its slot whichever region counted it.
	Beyond [2]int64
	// TTL is how long the store must keep the cell if it counts into it.
	TTL time.Duration
	// Writer names who takes, and Total is everything Writer counted into
	// the cell once this take is counted, Cost included: see
	// [SlotTaker.TakeSlots]. A writer has one take in flight at a time, so
	// that a refused take's Total is not counted by a later one.
	Writer string
	Total  int64
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

// Held returns what the two cells hold with beyond (see
// [SlotTake.Beyond]): each cell's count less its refunds plus its beyond,
// never below zero, summed.
func (c SlotCounts) Held(beyond [2]int64) int64 {
	return max(c.Cur-c.CurRefunds+beyond[0], 0) + max(c.Prev-c.PrevRefunds+beyond[1], 0)
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

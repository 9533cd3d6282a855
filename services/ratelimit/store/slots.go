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
	// TakeSlots counts Cost into cell Key, a cell of a concurrency
	// limit's pool (see PoolCode), if what the pool holds leaves room for
	// it under Limit, and answers what the store holds of the pool
	// afterwards. What the pool holds is, for each of its cells that has
	// not ended at Now (every one the store was written, and every one
	// named in Beyond), its count less its refunds plus what the caller
	// adds to it (Beyond), never below zero, summed. It keeps a cell it
	// counts into for at least TTL. Cells of the pool are those of Key's
	// workspace, namespace and identifier, on any grid.
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
	// ReadSlots answers what the store holds of the pool of k at now
	// (unix ms), as TakeSlots does, and takes nothing: every cell that
	// has not ended, and k's own, with its count and refunds; and, when
	// writer is not empty, the total the store holds for writer in k
	// (Written; 0 for none): whether a take whose answer was lost was
	// applied, since a writer's total never shrinks. It writes nothing:
	// a read of the pool succeeds where writes fail.
	ReadSlots(ctx context.Context, k CellKey, now int64, writer string) (SlotCounts, error)
	// ReleaseSlots writes inc, the releases of a pool cell (its Key's
	// Refunds set, a Writer and its Total: see [Increment]), and answers
	// in the same step what inc's cell holds afterwards and what the
	// store holds of the pool at now (unix ms), as ReadSlots does: a
	// release and what is held after it in one round trip. A failure may
	// have applied the write, which a later write of the same total
	// counts once.
	ReleaseSlots(ctx context.Context, inc Increment, now int64) (int64, []PoolCell, error)
}

// SlotTake asks for slots: see [SlotTaker].
type SlotTake struct {
	// Key is the pool cell the slots are counted in (never a refunds
	// cell).
	Key CellKey
	// Cost is how many slots, Limit how many may be held.
	Cost, Limit int64
	// Now is the caller's clock, in unix ms: a cell that ended by then
	// holds nothing.
	Now int64
	// Beyond is what is held beyond what the store holds, by cell of the
	// pool: the other regions' slots less their releases, as far as the
	// caller knows, and the caller's slots and releases that the store
	// has not been sent yet. It may be negative: a release answered in
	// another region (or by the caller, and not sent yet) of a slot
	// counted here frees it here. Each cell is summed over the regions
	// before it is clamped at zero, so that a release frees its slot
	// whichever region counted it.
	Beyond []PoolCell
	// TTL is how long the store must keep the cell if it counts into it.
	TTL time.Duration
	// Writer names who takes, and Total is everything Writer counted into
	// the cell once this take is counted, Cost included: see
	// [SlotTaker.TakeSlots]. A writer has one take in flight at a time, so
	// that a refused take's Total is not counted by a later one.
	Writer string
	Total  int64
}

// PoolCell is one cell of a pool and what it holds: in an answer, its
// count and its refunds; in [SlotTake.Beyond], what is held beyond the
// store (Count) and no refunds.
type PoolCell struct {
	// Key names the cell (never its refunds: see Refunds).
	Key            CellKey
	Count, Refunds int64
}

// SlotCounts is what a store holds of a concurrency limit's pool after a
// [SlotTaker.TakeSlots] or at a [SlotTaker.ReadSlots].
type SlotCounts struct {
	// Taken reports whether a take's slots were counted.
	Taken bool
	// Written is, in a read's answer, the total the store holds for the
	// writer the read named in its cell.
	Written int64
	// Cells are the pool's cells that had not ended, each with its count
	// and its refunds, in no order.
	Cells []PoolCell
}

// Held returns what the pool holds with beyond (see [SlotTake.Beyond]):
// each cell's count less its refunds plus its beyond, never below zero,
// summed over the cells of either.
func (c SlotCounts) Held(beyond []PoolCell) int64 {
	var held int64
	for _, cell := range c.Cells {
		held += cell.HeldWith(beyond)
	}
	for _, b := range beyond {
		if !c.has(b.Key) {
			held += max(b.Count, 0)
		}
	}
	return held
}

// HeldWith returns what cell holds with what beyond adds to it: its
// count less its refunds plus its beyond, never below zero.
func (cell PoolCell) HeldWith(beyond []PoolCell) int64 {
	n := cell.Count - cell.Refunds
	for _, b := range beyond {
		if b.Key == cell.Key {
			n += b.Count
		}
	}
	return max(n, 0)
}

// has reports whether c answers cell k.
func (c SlotCounts) has(k CellKey) bool {
	for _, cell := range c.Cells {
		if cell.Key == k {
			return true
		}
	}
	return false
}

// SamePool reports whether a and b are cells of one concurrency limit's
// pool: pool cells of one workspace, namespace and identifier.
func SamePool(a, b *CellKey) bool {
	return IsPoolCode(a.Duration.Milliseconds()) && IsPoolCode(b.Duration.Milliseconds()) &&
		a.Workspace == b.Workspace && a.Namespace == b.Namespace && a.Identifier == b.Identifier
}

// PoolCellEndOf returns when the slots counted in pool cell k free
// themselves, in unix ms.
func PoolCellEndOf(k *CellKey) int64 {
	shift, _ := PoolCodeCell(k.Duration.Milliseconds())
	return PoolCellEnd(shift, k.Sequence)
}

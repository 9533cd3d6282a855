package store

import (
	"context"
	"time"
)

// Global shares counts between regions as a grow-only counter (MySQL:
// package mysqlstore): one component per region and window cell, merged
// with max, read back as the region's own component and the sum of the
// others.
type Global interface {
	// Publish raises this region's component of each cell to at least its
	// count and marks it changed at the store's own time, in the order
	// given (callers sort counts with [CompareKeys]), and returns how many
	// of them, from the start, it wrote before the error that stopped it.
	Publish(ctx context.Context, region string, counts []CellCount) (written int, err error)
	// Sync returns every cell that has not expired at now (the caller's
	// clock: window sequences are the callers'; a cell expires at the end of
	// the window after its own) and of which any component changed at or
	// after since by the store's clock (all live cells for the zero time),
	// with this region's own component and the sum of every other region's,
	// in no particular order. It may return unchanged cells too, when
	// reading everything is cheaper. asOf is the store's time when the read
	// began: a later sync from asOf (less a look-back for writes still in
	// flight) misses nothing. Only the store's clock orders changes, so
	// callers whose clocks disagree still see each other's.
	Sync(ctx context.Context, region string, now, since time.Time) (rows []GlobalCount, asOf time.Time, err error)
}

// CellCount is one region's count of one cell.
type CellCount struct {
	Key CellKey
	// Count is the region's committed count of the cell: what its
	// processes admitted, without batch increments that may still roll
	// back.
	Count int64
	// Limit is the limit the region last saw for the cell's key; 0 when
	// it does not know it, and the store then keeps the one it holds.
	Limit int64
}

// GlobalCount is what the global store holds for one cell.
type GlobalCount struct {
	Key CellKey
	// Own is this region's component: it may only raise the regional count.
	Own int64
	// Others is the sum of every other region's component: the imported
	// count, which is added to decisions and never published again.
	Others int64
	// OthersLimit is the largest limit another region published the cell
	// with, or 0 if none said.
	OthersLimit int64
}

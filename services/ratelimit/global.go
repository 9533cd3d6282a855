package ratelimit

import (
	"context"
	"time"
)

// GlobalStore shares counts between regions as a grow-only counter (see
// [MySQLStore]): one component per region and window cell, merged with max,
// read back as the region's own component and the sum of the others.
type GlobalStore interface {
	// Publish raises this region's component of each cell to at least its
	// count, in the order given (callers sort counts in the store's key
	// order), and returns how many of them, from the start, it wrote before
	// the error that stopped it.
	Publish(ctx context.Context, region string, counts []CellCount) (written int, err error)
	// Sync returns every cell that has not expired at now and of which any
	// component changed at or after since (all live cells for the zero
	// time), with this region's own component and the sum of every other
	// region's. It may return unchanged cells too, when reading everything
	// is cheaper.
	Sync(ctx context.Context, region string, now, since time.Time) ([]GlobalCount, error)
}

// CellCount is one region's count of one cell.
type CellCount struct {
	Cell  Cell
	Count int64
	// Limit is the limit the region last saw for the cell's key.
	Limit int64
}

// GlobalCount is what the global store holds for one cell.
type GlobalCount struct {
	Cell Cell
	// Own is this region's component: it may only raise the regional count.
	Own int64
	// Others is the sum of every other region's component: the imported
	// count, which is added to decisions and never published again.
	Others int64
	// OthersLimit is the largest limit another region published the cell
	// with, or 0 if none said.
	OthersLimit int64
}

// Tuning of the global counters. They are constants because they trade
// MySQL load against cross-region latency for the whole fleet; a
// per-process knob would only let regions drift apart.
const (
	// globalFlushInterval is how often a process publishes its region's
	// counts of the cells worth sharing.
	globalFlushInterval = 10 * time.Second
	// globalSyncInterval is how often a process reads the other regions'
	// counts.
	globalSyncInterval = 10 * time.Second
	// globalSyncJitter spreads each tick by up to this share of the
	// interval after its absolute target time, so the fleet does not flush
	// in lockstep and a slow tick does not shift the ones after it.
	globalSyncJitter = 0.2
	// globalUtilizationFloor is the share of the limit a region must have
	// used in a cell before it publishes it: below half the limit a region
	// cannot push another over by itself.
	globalUtilizationFloor = 0.5
	// globalFlushTimeout bounds one flush or sync.
	globalFlushTimeout = 10 * time.Second
	// globalSyncLookback widens each incremental sync back in time: rows
	// are stamped with their writer's clock when the statement runs, and
	// become visible when it commits. Five seconds cover clock skew between
	// hosts kept by NTP (milliseconds) and the commit of a bulk upsert (tens
	// of milliseconds for 5,000 rows) with wide margins.
	globalSyncLookback = 5 * time.Second
	// globalFullSyncInterval is how often a sync reads every live row
	// instead of the changed ones: a safety net for a row that became
	// visible later than the lookback allows (a writer whose clock was far
	// behind, a statement stuck in the database).
	globalFullSyncInterval = 5 * time.Minute
)

// MaxStoredCount caps every count read from a store (Redis or MySQL), so
// that a corrupt value cannot overflow the decision maths: limits and costs
// are at most 2^53, and a few sums of 2^60 stay far below 2^63. A cell at the
// cap denies every request.
const MaxStoredCount = 1 << 60

// WithGlobalStore makes the region share counts with other regions through
// store.
func WithGlobalStore(store GlobalStore) Option {
	return func(s *Service) { s.global = store }
}

package ratelimit

import (
	"context"
	"time"
)

// GlobalStore shares counts between regions as a grow-only counter (MySQL:
// package mysqlstore): one component per region and window cell, merged
// with max, read back as the region's own component and the sum of the
// others.
type GlobalStore interface {
	// Publish raises this region's component of each cell to at least its
	// count and marks it changed at the store's own time, in the order
	// given (callers sort counts in the store's key order), and returns how
	// many of them, from the start, it wrote before the error that stopped
	// it.
	Publish(ctx context.Context, region string, counts []CellCount) (written int, err error)
	// Sync returns every cell that has not expired at now (the caller's
	// clock: window sequences are the callers') and of which any component
	// changed at or after since by the store's clock (all live cells for the
	// zero time), with this region's own component and the sum of every
	// other region's. It may return unchanged cells too, when reading
	// everything is cheaper. asOf is the store's time when the read began:
	// a later sync from asOf (less a look-back for writes still in flight)
	// misses nothing. Only the store's clock orders changes, so callers
	// whose clocks disagree still see each other's.
	Sync(ctx context.Context, region string, now, since time.Time) (rows []GlobalCount, asOf time.Time, err error)
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

// Default intervals of the global counters. A region's usage reaches
// another region within one flush plus one sync interval (plus jitter): 2.4 s
// at most with these, where 10 s each (the conservative setting, a tenth of
// the MySQL writes of busy cells and a tenth of the idle reads) takes up to
// 24 s, a third of a 60 s window. Idle, a process costs one statement per
// sync (an index-only count that finds nothing changed) and none per flush.
const (
	// DefaultGlobalFlushInterval is how often a process publishes the cells
	// that crossed the utilization floor or grew by a flush step since the
	// store last held them: what other regions must learn soon.
	DefaultGlobalFlushInterval = time.Second
	// DefaultGlobalFullFlushInterval is how often a process publishes every
	// cell worth sharing that grew at all, however little: the slow
	// schedule, which also catches a cell whose region count grew through
	// other processes of the region only.
	DefaultGlobalFullFlushInterval = 10 * time.Second
	// DefaultGlobalSyncInterval is how often a process reads what changed
	// in the other regions.
	DefaultGlobalSyncInterval = time.Second
)

// Fixed tuning of the global counters.
const (
	// globalSyncJitter spreads each tick by up to this share of the
	// interval after its absolute target time, so the fleet does not flush
	// in lockstep and a slow tick does not shift the ones after it.
	globalSyncJitter = 0.2
	// globalUtilizationFloor is the share of the limit a region must have
	// used in a cell of a window shorter than globalPresenceMinWindow before
	// it publishes it, and in any cell no other region holds before it
	// publishes more than its presence: below half the limit a region cannot
	// push another over by itself.
	globalUtilizationFloor = 0.5
	// globalFlushStep is the growth, as a share of the limit, that makes a
	// published cell due at the next prompt flush; smaller growth waits for
	// the full flush. A region that shares a cell with others takes a step
	// of this times twice its share of the cell's count (see flushStep). It
	// bounds what a prompt flush writes: a busy cell is written about ten
	// times per window and region on the prompt schedule, however short the
	// interval, while the others' view of it lags by less than a fifth of
	// the limit beyond the interval itself, however many regions share it.
	globalFlushStep = 0.1
	// globalPresenceFloor replaces globalUtilizationFloor for windows of at
	// least globalPresenceMinWindow: a region publishes such a cell once it
	// used a twentieth of the limit, so that regions sharing a key learn
	// of each other while the key is far from its limit. With the floor at
	// half the limit, R regions each just under it admitted up to R/2
	// times the limit before any learnt of the others (R = 10: 4.2× in the
	// worst 60 s window); at a twentieth, R/20.
	globalPresenceFloor = 0.05
	// globalPresenceMinWindow is the shortest window the presence floor is
	// for: propagation takes one to two and a half seconds on the default
	// schedule, so a shorter window gains little from it, and its rows
	// would be written every few seconds per key and region.
	globalPresenceMinWindow = time.Minute
	// globalFlushTimeout bounds one flush or sync.
	globalFlushTimeout = 10 * time.Second
	// globalBreakerProbe is how long the global store's breaker stays open
	// before one flush or sync probes the store again.
	globalBreakerProbe = 10 * time.Second
	// globalBreakerFailures consecutive failed flushes or syncs open the
	// global store's breaker.
	globalBreakerFailures = 5
	// globalSyncLookback widens each incremental sync back in time: rows
	// are stamped with the store's clock when their statement begins, and
	// become visible when it commits. One second covers the commit of a
	// bulk upsert (tens of milliseconds for 5,000 rows) with a wide margin,
	// and keeps what a one-second sync reads to the changes of about two
	// seconds. The writers' and readers' clocks play no part.
	globalSyncLookback = time.Second
	// globalFullSyncInterval is how often a sync reads every live row
	// instead of the changed ones: a safety net for a row that became
	// visible later than the lookback allows (a statement stuck in the
	// database between its start and its commit).
	globalFullSyncInterval = 5 * time.Minute
)

// globalIntervals is the schedule of the global loop.
type globalIntervals struct {
	flush, fullFlush, sync time.Duration
}

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

// WithGlobalFlushIntervals sets how often the process publishes to the
// global store: every prompt, the cells that crossed the utilization floor
// or grew by a tenth of their limit since the store last held them; every
// full, every cell worth sharing that grew at all. full is raised to prompt
// if below it. Zero or negative values keep the defaults
// ([DefaultGlobalFlushInterval], [DefaultGlobalFullFlushInterval]).
func WithGlobalFlushIntervals(prompt, full time.Duration) Option {
	return func(s *Service) {
		if prompt > 0 {
			s.globalEvery.flush = prompt
		}
		if full > 0 {
			s.globalEvery.fullFlush = full
		}
	}
}

// WithGlobalSyncInterval sets how often the process reads the other regions'
// changes from the global store. Zero or negative keeps
// [DefaultGlobalSyncInterval].
func WithGlobalSyncInterval(d time.Duration) Option {
	return func(s *Service) {
		if d > 0 {
			s.globalEvery.sync = d
		}
	}
}

package ratelimit

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Default intervals of the global counters. A region's usage reaches
// another region within one flush plus one sync interval (plus jitter): 2.4 s
// at most with these, where 10 s each (the conservative setting, a tenth of
// the MySQL writes of busy cells and a tenth of the idle reads) takes up to
// 24 s, two fifths of a 60 s window. Idle, a process costs one statement per
// sync (an index-only count that finds nothing changed) and none per flush.
const (
	// DefaultGlobalFlushInterval is how often a process publishes the cells
	// that crossed their floor or grew by a flush step since the
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
	// globalTickJitter spreads each tick by up to this share of the
	// interval after its absolute target time, so the fleet does not flush
	// in lockstep and a slow tick does not shift the ones after it.
	globalTickJitter = 0.2
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
	// DefaultGlobalFlushTimeout bounds one flush: its statements (a bulk
	// upsert per chunk of rows), not the set-up of a connection, which the
	// store bounds on its own.
	DefaultGlobalFlushTimeout = 10 * time.Second
	// DefaultGlobalSyncTimeout bounds one sync: its two statements (the
	// count of changed rows, then the rows), each of which a slow database
	// may hold for seconds. A sync that runs out is counted and the next
	// one starts at its own tick; a flush runs meanwhile on its own loop.
	DefaultGlobalSyncTimeout = 30 * time.Second
	// globalBreakerProbe is how long a breaker of the global store stays
	// open before one flush or sync probes the store again.
	globalBreakerProbe = 10 * time.Second
	// globalBreakerFailures consecutive failed flushes (or syncs) open the
	// flushes' (or syncs') breaker.
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

// globalIntervals is the schedule of the global loops, and the budget of
// each call.
type globalIntervals struct {
	flush, fullFlush, sync    time.Duration
	flushTimeout, syncTimeout time.Duration
}

// WithGlobalStore makes the region share counts with other regions through
// st (see [store.Global]).
func WithGlobalStore(st store.Global) Option {
	return func(s *settings) { s.global = st }
}

// WithGlobalFlushIntervals sets how often the process publishes to the
// global store: every prompt, the cells that crossed their floor or grew by
// a flush step (at most a tenth of their limit) since the store last held
// them; every
// full, every cell worth sharing that grew at all. full is raised to prompt
// if below it. Zero or negative values keep the defaults
// ([DefaultGlobalFlushInterval], [DefaultGlobalFullFlushInterval]).
func WithGlobalFlushIntervals(prompt, full time.Duration) Option {
	return func(s *settings) {
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
	return func(s *settings) {
		if d > 0 {
			s.globalEvery.sync = d
		}
	}
}

// WithGlobalTimeouts sets how long one flush and one sync of the global
// store may take ([DefaultGlobalFlushTimeout], [DefaultGlobalSyncTimeout]
// for zero or negative values). A database that answers slowly but
// answers keeps imports going as long as a sync fits in its budget.
func WithGlobalTimeouts(flush, sync time.Duration) Option {
	return func(s *settings) {
		if flush > 0 {
			s.globalEvery.flushTimeout = flush
		}
		if sync > 0 {
			s.globalEvery.syncTimeout = sync
		}
	}
}

// globalTier shares counts between regions through the global store: a
// request that counts into a cell worth sharing queues it (noteGrowth), and
// the tier's two loops (run) publish what grew and import what the other
// regions published, each on its own schedule, budget and breaker, so that
// a slow write never holds back an import or the other way round. A nil
// *globalTier is a region alone: noteGrowth does nothing.
type globalTier struct {
	region  string
	store   store.Global
	clock   Clock
	logger  *slog.Logger
	metrics *metrics
	// windows is the service's table: a full flush walks it, a sync
	// finds the windows of the rows it reads and creates some.
	windows *windowTable
	// hydrated is what a cell created by a sync starts as: hydrated when
	// no regional store could tell this process more about it.
	hydrated bool
	// flushBreaker and syncBreaker guard the store's writes and reads
	// apart: a database that times out reads can still take writes.
	flushBreaker, syncBreaker *gobreaker.CircuitBreaker[any]
	every                     globalIntervals
	// halfFloorOnly shares cells as before the presence floor and the
	// share-scaled flush step (see settings).
	halfFloorOnly bool
	// grown holds the cells counted into at or above the utilization
	// floor (or shared by another region) since the last flush: what the
	// next prompt flush looks at, so its work follows the cells that
	// change rather than every window held.
	grown cells.Queue[cells.Ref]
	// unpublished is the regional store, if it keeps an index of the cells
	// to publish (see store.Unpublished): the full flush publishes those
	// whose counter stopped marking them.
	unpublished store.Unpublished
	// readSlots, set when the region has a regional store, brings the
	// cells of concurrency limits up to date from it before a prompt
	// flush publishes them (see slotCells).
	readSlots func(ctx context.Context, ws []*cells.Window, now int64)
	// state is the loops' own bookkeeping.
	state *globalState
	// lastSync is when the latest sync that succeeded began, in unix ms by
	// the limiter's clock (0 before the first).
	lastSync atomic.Int64
}

func newGlobalTier(region string, cfg *settings, m *metrics, windows *windowTable, hydrated bool) *globalTier {
	g := &globalTier{
		region:        region,
		store:         cfg.global,
		clock:         cfg.clock,
		logger:        cfg.logger,
		metrics:       m,
		windows:       windows,
		hydrated:      hydrated,
		every:         cfg.globalEvery,
		halfFloorOnly: cfg.halfFloorOnly,
		state:         newGlobalState(),
	}
	g.every.fullFlush = max(g.every.fullFlush, g.every.flush)
	g.flushBreaker, g.syncBreaker = g.newBreaker("flush"), g.newBreaker("sync")
	g.unpublished, _ = cfg.regional.(store.Unpublished)
	return g
}

// markFor returns the limit to mark c, a cell of w being replayed, with in
// the regional store's index of cells to publish (see store.Unpublished),
// or 0: a cell worth sharing (at or above its floor, or shared by another
// region) or refunds, once per full flush interval.
func (g *globalTier) markFor(w *cells.Window, c *cells.Cell) int64 {
	if g.unpublished == nil || c.Flags.Load()&cells.Marked != 0 {
		return 0
	}
	limit := w.Limit.Load()
	if !g.worthSharing(w, c, limit) && !sharedRefunds(w, c) {
		return 0
	}
	c.Flags.Or(cells.Marked)
	return limit
}

// idleAfter is how long no process marked a cell before the full flushes
// publish it from the regional store: two full flush intervals and a
// prompt one, by when the process that counts it has published what it
// counted, unless it died or could not reach the global store. A cell
// replayed at least once a full flush interval is marked again meanwhile.
func (g *globalTier) idleAfter() time.Duration { return 2*g.every.fullFlush + g.every.flush }

// maxIdlePerFlush is how many idle cells one round of a full flush reads
// from the index; maxIdleRounds bounds the rounds of one flush (the rest
// wait for the next): up to 100,000 cells a flush, 10,000 a second per
// process at the default full flush interval.
const (
	maxIdlePerFlush = 1000
	maxIdleRounds   = 100
)

// floor is the count of a cell of limit, in cells of durationMs, from
// which a region publishes it: a twentieth of the limit for windows of
// a minute or more (globalPresenceFloor), half of it for shorter ones.
func (g *globalTier) floor(limit, durationMs int64) int64 {
	share := globalUtilizationFloor
	if !g.halfFloorOnly && durationMs >= globalPresenceMinWindow.Milliseconds() {
		share = globalPresenceFloor
	}
	return max(1, int64(math.Ceil(float64(limit)*share)))
}

// importFloor is the count of another region's cell of limit in p's
// cells from which a sync takes it into a window this process does not
// hold: the floor it would publish from, by the length of p's cells, but
// a token bucket's and a concurrency limit's taken as a window of a
// minute or more, whatever their cells' length, since their state
// outlives a cell (a bucket's level, a slot's lease).
func (g *globalTier) importFloor(p period.Period, limit int64) int64 {
	if k := p.Kind(); k == period.Bucket || k == period.Pool {
		return g.floor(limit, globalPresenceMinWindow.Milliseconds())
	}
	return g.floor(limit, p.Ms())
}

// halfFloor is the utilization floor of a cell of limit: half of it, the
// most a region can use without pushing another over by itself.
func halfFloor(limit int64) int64 {
	return int64(math.Ceil(float64(limit) * globalUtilizationFloor))
}

// flushStep is the growth of a published cell of limit that makes it due at
// the next prompt flush: a tenth of the limit, scaled by twice this region's
// share of the cell's count (own of own + others) when that is under one.
// Each region's unpublished growth then lags the others' view by at most
// twice its share of a tenth, so all regions together by a fifth, however
// many share the key; a region with a small share writes about as often as
// one with a large one. Two regions sharing a key evenly keep the step of a
// tenth: they were within 1.2× the limit already.
func (g *globalTier) flushStep(limit, own, others int64) int64 {
	step := float64(limit) * globalFlushStep
	if !g.halfFloorOnly && others > 0 && own > 0 {
		step *= min(1, 2*float64(own)/float64(own+others))
	}
	return max(1, int64(math.Ceil(step)))
}

// noteGrowth queues c, the cell of w a request just counted into with limit,
// for the next prompt flush if it is worth sharing: at or above the
// floor, or already shared by another region. A queued cell
// costs later requests one atomic load until the flush takes it; one below
// the floor costs three.
func (g *globalTier) noteGrowth(w *cells.Window, c *cells.Cell, limit int64) {
	if g != nil {
		g.queueGrown(w, c, limit)
	}
}

// noteRefund queues c, a cell of the refunds window w that a refund just
// counted into, for the next prompt flush: a refund reaches the other
// regions however small (see sharedRefunds).
func (g *globalTier) noteRefund(w *cells.Window, c *cells.Cell) {
	if g != nil && c.Flags.Load()&cells.Grown == 0 {
		g.pushGrown(w, c)
	}
}

// worthSharing reports whether c, a cell of w under limit, is worth
// publishing promptly: at or above its floor, or shared by another region.
// It is asked on the request path, of the key's own cells only.
func (g *globalTier) worthSharing(w *cells.Window, c *cells.Cell, limit int64) bool {
	return c.Count.Load() >= g.cellFloor(w, limit) || c.Global.Load() != 0
}

// cellFloor is the floor of w's cells under limit: floor's, but 1 for a
// token bucket's and a concurrency limit's. A window's count starts from
// zero each window, so what a region keeps to itself under the floor is a
// bounded error each window; a bucket carries its level from cell to cell,
// so counts no region ever saw would add up, window after window, into an
// error without a bound; slots are few and held for a lease, and a region
// that kept half of them to itself would let every other region hold that
// many more.
func (g *globalTier) cellFloor(w *cells.Window, limit int64) int64 {
	p := w.Period()
	if k := p.Kind(); k == period.Bucket || k == period.Pool {
		return 1
	}
	return g.floor(limit, p.Ms())
}

// sharedRefunds reports whether c is a cell of refunds (w holds a key's
// refunds) with any: they are published whatever their size, as a cell
// another region shares is. The background loops ask it.
func sharedRefunds(w *cells.Window, c *cells.Cell) bool {
	return c.Count.Load() > 0 && w.HoldsRefunds()
}

// queueGrown is noteGrowth for a region that shares counts.
func (g *globalTier) queueGrown(w *cells.Window, c *cells.Cell, limit int64) {
	if c.Flags.Load()&cells.Grown != 0 {
		return
	}
	if !g.worthSharing(w, c, limit) {
		return
	}
	g.pushGrown(w, c)
}

// pushGrown queues c, a cell of w, for the next prompt flush unless it is
// queued already.
func (g *globalTier) pushGrown(w *cells.Window, c *cells.Cell) {
	if c.Flags.Or(cells.Grown)&cells.Grown != 0 {
		return
	}
	if !g.grown.Push(cells.Ref{W: w, C: c}) {
		// Its next request queues it again; the full flush publishes it
		// meanwhile.
		c.Flags.And(^cells.Grown)
		g.metrics.queueOverflow.WithLabelValues("flush").Inc()
	}
}

// newBreaker returns a circuit breaker that guards the global store's
// flushes or syncs (op), so that a sick database fails the next tick fast
// instead of blocking it for the call's budget. sony/gobreaker is
// maintained, small and generic over the result type.
func (g *globalTier) newBreaker(op string) *gobreaker.CircuitBreaker[any] {
	return gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        "ratelimit-global-" + op,
		MaxRequests: 1,
		Timeout:     globalBreakerProbe,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= globalBreakerFailures },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			g.logger.Warn("global store circuit breaker changed state", "op", op, "from", from.String(), "to", to.String())
		},
	})
}

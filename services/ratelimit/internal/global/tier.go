// Package global is the limiter's global tier: it shares the counts of
// the regions through the global store (MySQL), each region publishing
// its own components of the cells worth sharing and importing the sum of
// the others'. It knows the cell table, the pools and the stores, and asks
// the limiter's models what it needs of them (see Models).
package global

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/pool"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Fixed tuning of the global counters. The exported ones are what the
// limiter's tests and accuracy reports model.
const (
	// TickJitter spreads each tick by up to this share of the
	// interval after its absolute target time, so the fleet does not flush
	// in lockstep and a slow tick does not shift the ones after it.
	TickJitter = 0.2
	// UtilizationFloor is the share of the limit a region must have
	// used in a cell of a window shorter than presenceMinWindow before
	// it publishes it, and in any cell no other region holds before it
	// publishes more than its presence: below half the limit a region cannot
	// push another over by itself.
	UtilizationFloor = 0.5
	// flushStepShare is the growth, as a share of the limit, that makes a
	// published cell due at the next prompt flush; smaller growth waits for
	// the full flush. A region that shares a cell with others takes a step
	// of this times twice its share of the cell's count (see FlushStep). It
	// bounds what a prompt flush writes: a busy cell is written about ten
	// times per window and region on the prompt schedule, however short the
	// interval, while the others' view of it lags by less than a fifth of
	// the limit beyond the interval itself, however many regions share it.
	flushStepShare = 0.1
	// PresenceFloor replaces UtilizationFloor for windows of at
	// least presenceMinWindow: a region publishes such a cell once it
	// used a twentieth of the limit, so that regions sharing a key learn
	// of each other while the key is far from its limit. With the floor at
	// half the limit, R regions each just under it admitted up to R/2
	// times the limit before any learnt of the others (R = 10: 4.2× in the
	// worst 60 s window); at a twentieth, R/20.
	PresenceFloor = 0.05
	// presenceMinWindow is the shortest window the presence floor is
	// for: propagation takes one to two and a half seconds on the default
	// schedule, so a shorter window gains little from it, and its rows
	// would be written every few seconds per key and region.
	presenceMinWindow = time.Minute
	// breakerProbe is how long a breaker of the global store stays
	// open before one flush or sync probes the store again.
	breakerProbe = 10 * time.Second
	// breakerFailures consecutive failed flushes (or syncs) open the
	// flushes' (or syncs') breaker.
	breakerFailures = 5
	// SyncLookback widens each incremental sync back in time: rows
	// are stamped with the store's clock when their statement begins, and
	// become visible when it commits. One second covers the commit of a
	// bulk upsert (tens of milliseconds for 5,000 rows) with a wide margin,
	// and keeps what a one-second sync reads to the changes of about two
	// seconds. The writers' and readers' clocks play no part.
	SyncLookback = time.Second
	// FullSyncInterval is how often a sync reads every live row
	// instead of the changed ones: a safety net for a row that became
	// visible later than the lookback allows (a statement stuck in the
	// database between its start and its commit).
	FullSyncInterval = 5 * time.Minute
)

// Tier shares counts between regions through the global store: a request
// that counts into a cell worth sharing queues it (NoteGrowth), and the
// tier's two loops (Run) publish what grew and import what the other
// regions published, each on its own schedule, budget and breaker, so that
// a slow write never holds back an import or the other way round. A nil
// *Tier is a region alone: NoteGrowth and NoteRefund do nothing.
type Tier struct {
	region  string
	store   store.Global
	clock   Clock
	logger  *slog.Logger
	metrics *Metrics
	// table is the limiter's cell table: a full flush walks it, a sync
	// finds the windows of the rows it reads and creates some.
	table *cells.Table
	// pools are the table's concurrency pools, which a flush publishes
	// whole (see slotCells).
	pools *pool.Set
	// models is what the tier asks the limiter's models.
	models Models
	// hydrated is what a cell created by a sync starts as: hydrated when
	// no regional store could tell this process more about it.
	hydrated bool
	// flushBreaker and syncBreaker guard the store's writes and reads
	// apart: a database that times out reads can still take writes.
	flushBreaker, syncBreaker *gobreaker.CircuitBreaker[any]
	every                     Intervals
	// halfFloorOnly shares cells as before the presence floor and the
	// share-scaled flush step (see Config).
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

// Clock tells the time: the limiter's clock, which tests move by hand.
type Clock interface {
	Now() time.Time
}

// Models is what the tier asks the limiter's models of a window's cells.
type Models interface {
	// Raise raises v, a count of c (its Count or Global), a cell of w, to
	// n if below it, at now (unix ms): the window's model keeps what it
	// derives from its cells with them (a token bucket's level).
	Raise(w *cells.Window, c *cells.Cell, v *atomic.Int64, n, now int64)
}

// Intervals is the schedule of the tier's loops, and the budget of each
// call.
type Intervals struct {
	// Flush is how often the cells that crossed their floor or grew by
	// a flush step are published; FullFlush how often every cell worth
	// sharing that grew at all is (raised to Flush if below it); Sync
	// how often the other regions' changes are read.
	Flush, FullFlush, Sync time.Duration
	// FlushTimeout and SyncTimeout bound one flush and one sync.
	FlushTimeout, SyncTimeout time.Duration
}

// Config is what a Tier is made of.
type Config struct {
	// Region names this region's component of every row.
	Region string
	// Store is the global store.
	Store store.Global
	// Regional is the region's store, nil if it has none: one that
	// indexes the cells to publish (store.Unpublished) lets a full flush
	// publish what a process that died had not.
	Regional store.Regional
	// ReadSlots, with a regional store, reads the pools of ws (a window
	// of each) from it at now, before a flush publishes them.
	ReadSlots func(ctx context.Context, ws []*cells.Window, now int64)
	// Clock is the limiter's clock, Logger its background logger, and
	// Metrics the tier's metrics.
	Clock   Clock
	Logger  *slog.Logger
	Metrics *Metrics
	// Table is the limiter's cell table and Pools its concurrency pools.
	Table *cells.Table
	Pools *pool.Set
	// Models is what the tier asks of the models.
	Models Models
	// Every is the loops' schedule.
	Every Intervals
	// HalfFloorOnly shares cells as before the presence floor and the
	// share-scaled flush step: from half the limit, a tenth of it at a
	// time. Only the accuracy report sets it, for its "before" rows.
	HalfFloorOnly bool
}

// New returns the tier of cfg. It starts no goroutines: see Run.
func New(cfg Config) *Tier {
	g := &Tier{
		region:        cfg.Region,
		store:         cfg.Store,
		clock:         cfg.Clock,
		logger:        cfg.Logger,
		metrics:       cfg.Metrics,
		table:         cfg.Table,
		pools:         cfg.Pools,
		models:        cfg.Models,
		hydrated:      cfg.Regional == nil,
		every:         cfg.Every,
		halfFloorOnly: cfg.HalfFloorOnly,
		readSlots:     cfg.ReadSlots,
		state:         newGlobalState(),
	}
	g.every.FullFlush = max(g.every.FullFlush, g.every.Flush)
	g.flushBreaker, g.syncBreaker = g.newBreaker("flush"), g.newBreaker("sync")
	g.unpublished, _ = cfg.Regional.(store.Unpublished)
	return g
}

// Indexes reports whether the regional store keeps an index of the cells
// to publish, which MarkFor marks them in.
func (g *Tier) Indexes() bool { return g.unpublished != nil }

// LastSync returns when the latest sync that succeeded began (the zero
// time before the first).
func (g *Tier) LastSync() time.Time {
	ms := g.lastSync.Load()
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// ForgetPublished forgets what the store is known to hold of each cell:
// the next flush publishes every cell worth sharing as if it grew. A
// benchmark of a flush of changed cells calls it between rounds.
func (g *Tier) ForgetPublished() {
	g.state.mu.Lock()
	defer g.state.mu.Unlock()
	g.state.flushed = map[*cells.Cell]flushedCount{}
}

// MarkFor returns the limit to mark c, a cell of w being replayed, with in
// the regional store's index of cells to publish (see store.Unpublished),
// or 0: a cell worth sharing (at or above its floor, or shared by another
// region) or refunds, once per full flush interval.
func (g *Tier) MarkFor(w *cells.Window, c *cells.Cell) int64 {
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
func (g *Tier) idleAfter() time.Duration { return 2*g.every.FullFlush + g.every.Flush }

// MaxIdlePerFlush is how many idle cells one round of a full flush reads
// from the index; MaxIdleRounds bounds the rounds of one flush (the rest
// wait for the next): up to 100,000 cells a flush, 10,000 a second per
// process at the default full flush interval.
const (
	MaxIdlePerFlush = 1000
	MaxIdleRounds   = 100
)

// Floor is the count of a cell of limit, in cells of durationMs, from
// which a region publishes it: a twentieth of the limit for windows of
// a minute or more (PresenceFloor), half of it for shorter ones.
func (g *Tier) Floor(limit, durationMs int64) int64 {
	share := UtilizationFloor
	if !g.halfFloorOnly && durationMs >= presenceMinWindow.Milliseconds() {
		share = PresenceFloor
	}
	return max(1, int64(math.Ceil(float64(limit)*share)))
}

// importFloor is the count of another region's cell of limit in p's
// cells from which a sync takes it into a window this process does not
// hold: the floor it would publish from, by the length of p's cells, but
// a token bucket's and a concurrency limit's taken as a window of a
// minute or more, whatever their cells' length, since their state
// outlives a cell (a bucket's level, a slot's lease).
func (g *Tier) importFloor(p period.Period, limit int64) int64 {
	if p.OutlivesCell() {
		return g.Floor(limit, presenceMinWindow.Milliseconds())
	}
	return g.Floor(limit, p.Ms())
}

// halfFloor is the utilization floor of a cell of limit: half of it, the
// most a region can use without pushing another over by itself.
func halfFloor(limit int64) int64 {
	return int64(math.Ceil(float64(limit) * UtilizationFloor))
}

// FlushStep is the growth of a published cell of limit that makes it due at
// the next prompt flush: a tenth of the limit, scaled by twice this region's
// share of the cell's count (own of own + others) when that is under one.
// Each region's unpublished growth then lags the others' view by at most
// twice its share of a tenth, so all regions together by a fifth, however
// many share the key; a region with a small share writes about as often as
// one with a large one. Two regions sharing a key evenly keep the step of a
// tenth: they were within 1.2× the limit already.
func (g *Tier) FlushStep(limit, own, others int64) int64 {
	step := float64(limit) * flushStepShare
	if !g.halfFloorOnly && others > 0 && own > 0 {
		step *= min(1, 2*float64(own)/float64(own+others))
	}
	return max(1, int64(math.Ceil(step)))
}

// NoteGrowth queues c, the cell of w a request just counted into with limit,
// for the next prompt flush if it is worth sharing: at or above the
// floor, or already shared by another region. A queued cell
// costs later requests one atomic load until the flush takes it; one below
// the floor costs three.
func (g *Tier) NoteGrowth(w *cells.Window, c *cells.Cell, limit int64) {
	if g != nil {
		g.queueGrown(w, c, limit)
	}
}

// NoteRefund queues c, a cell of the refunds window w that a refund just
// counted into, for the next prompt flush: a refund reaches the other
// regions however small (see sharedRefunds).
func (g *Tier) NoteRefund(w *cells.Window, c *cells.Cell) {
	if g != nil && c.Flags.Load()&cells.Grown == 0 {
		g.pushGrown(w, c)
	}
}

// worthSharing reports whether c, a cell of w under limit, is worth
// publishing promptly: at or above its floor, or shared by another region.
// It is asked on the request path, of the key's own cells only.
func (g *Tier) worthSharing(w *cells.Window, c *cells.Cell, limit int64) bool {
	return c.Count.Load() >= g.cellFloor(w, limit) || c.Global.Load() != 0
}

// cellFloor is the floor of w's cells under limit: Floor's, but 1 for a
// token bucket's and a concurrency limit's. A window's count starts from
// zero each window, so what a region keeps to itself under the floor is a
// bounded error each window; a bucket carries its level from cell to cell,
// so counts no region ever saw would add up, window after window, into an
// error without a bound; slots are few and held for a lease, and a region
// that kept half of them to itself would let every other region hold that
// many more.
func (g *Tier) cellFloor(w *cells.Window, limit int64) int64 {
	p := w.Period()
	if p.OutlivesCell() {
		return 1
	}
	return g.Floor(limit, p.Ms())
}

// sharedRefunds reports whether c is a cell of refunds (w holds a key's
// refunds) with any: they are published whatever their size, as a cell
// another region shares is. The background loops ask it.
func sharedRefunds(w *cells.Window, c *cells.Cell) bool {
	return c.Count.Load() > 0 && w.HoldsRefunds()
}

// queueGrown is NoteGrowth for a region that shares counts.
func (g *Tier) queueGrown(w *cells.Window, c *cells.Cell, limit int64) {
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
func (g *Tier) pushGrown(w *cells.Window, c *cells.Cell) {
	if c.Flags.Or(cells.Grown)&cells.Grown != 0 {
		return
	}
	if !g.grown.Push(cells.Ref{W: w, C: c}) {
		// Its next request queues it again; the full flush publishes it
		// meanwhile.
		c.Flags.And(^cells.Grown)
		g.metrics.Overflow.Inc()
	}
}

// newBreaker returns a circuit breaker that guards the global store's
// flushes or syncs (op), so that a sick database fails the next tick fast
// instead of blocking it for the call's budget. sony/gobreaker is
// maintained, small and generic over the result type.
func (g *Tier) newBreaker(op string) *gobreaker.CircuitBreaker[any] {
	return gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        "ratelimit-global-" + op,
		MaxRequests: 1,
		Timeout:     breakerProbe,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= breakerFailures },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			g.logger.Warn("global store circuit breaker changed state", "op", op, "from", from.String(), "to", to.String())
		},
	})
}

package global

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/pool"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// globalState is the global loops' own bookkeeping. The flush loop and the
// sync loop share flushed under mu; each keeps its own times.
type globalState struct {
	mu sync.Mutex
	// flushed is, per cell, the count the store is known to hold for this
	// region: what the last successful flush wrote, or the own component a
	// sync read back. The change filter skips cells that have not grown past
	// it. Keeping it here rather than in every cell keeps cells small; only
	// cells above their floor ever get an entry.
	flushed map[*cells.Cell]flushedCount
	// lastFull is when the latest sync that read every live row began, and
	// lastFullFlush when the latest flush that walked every window did, by
	// the limiter's clock. Zero before the first.
	lastFull, lastFullFlush time.Time
	// syncedAsOf is the store's time when the latest successful sync began:
	// where the next incremental one starts (less SyncLookback). The
	// store's clock, not this process's: only it orders the rows' stamps.
	syncedAsOf time.Time
}

func newGlobalState() *globalState {
	return &globalState{flushed: map[*cells.Cell]flushedCount{}}
}

type flushedCount struct {
	count     int64
	expiresAt int64 // unix ms after which the cell no longer counts anywhere
}

// Run flushes and syncs on their jittered schedules, in two loops, until
// ctx is done, then runs one more full flush of what this process counted,
// within the flush budget, so that it is published before the process
// exits. A flush or sync under way then is cancelled, but a connection the
// global store is setting up keeps its own budget (see
// mysqlstore.connectTimeout): the loops end within that plus one flush
// budget of ctx (40 s by default; 10 s once connected). A slow flush does not
// delay a sync, nor a slow sync a flush: a tick that comes while its call
// is under way is skipped, and the next starts on schedule.
func (g *Tier) Run(ctx context.Context) {
	anchor := g.clock.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		every(ctx, g.clock, anchor, g.every.Sync, g.Sync)
	})
	every(ctx, g.clock, anchor, g.every.Flush, func(ctx context.Context) { g.Flush(ctx, g.FullFlushDue()) })
	// The last full flush of what this process counted; the idle cells of
	// the region are the other processes' to publish.
	g.publishCounted(context.Background(), true)
	wg.Wait()
}

// every calls fn on the jittered schedule of interval from anchor until ctx
// is done.
func every(ctx context.Context, clock Clock, anchor time.Time, interval time.Duration, fn func(context.Context)) {
	t := time.NewTimer(untilNextTick(anchor, clock.Now(), interval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
			t.Reset(untilNextTick(anchor, clock.Now(), interval))
		}
	}
}

// FullFlushDue reports whether the next flush should walk every window: the
// full flush interval has passed since the last one, less half a prompt
// interval so that jitter does not push it one prompt tick late.
func (g *Tier) FullFlushDue() bool {
	iv := g.every
	return g.state.lastFullFlush.IsZero() || g.clock.Now().Sub(g.state.lastFullFlush) >= iv.FullFlush-iv.Flush/2
}

// untilNextTick returns how long to wait at now for the next tick of a
// schedule that fires once per interval at anchor + k·interval, each tick
// jittered by up to TickJitter of the interval. Targets are absolute,
// so a slow tick does not shift the ones after it, and a missed target is
// skipped. Both times are the limiter's clock's.
func untilNextTick(anchor, now time.Time, interval time.Duration) time.Duration {
	k := now.Sub(anchor)/interval + 1
	target := anchor.Add(k * interval)
	jitter := time.Duration(rand.Float64() * TickJitter * float64(interval))
	return target.Add(jitter).Sub(now)
}

// flushCandidate is one cell a flush publishes.
type flushCandidate struct {
	c     *cells.Cell
	count store.CellCount
}

// Flush publishes this region's count of the cells worth sharing: a cell this
// region has used at least its floor of (floor), or one that another
// region already published (so that traffic spread thinly over many regions is
// still shared), and only if it grew since the store last held it; a cell no
// other region holds publishes its presence at the floor and nothing more until
// half the limit. A prompt flush (full false) looks only at the cells requests
// counted into since the last flush, and publishes those that crossed the floor
// or grew by a flush step; a full one walks every window and publishes any
// growth. Speculative batch increments are never published. The store's record
// of a cell is updated only once the write succeeded, so a failed flush is
// retried: at the next full flush, or the next prompt one if a request counts
// into the cell again.
func (g *Tier) Flush(ctx context.Context, full bool) {
	g.publishCounted(ctx, full)
	if full {
		g.PublishIdle(ctx)
	}
}

// publishCounted is the flush of what this process counted.
func (g *Tier) publishCounted(ctx context.Context, full bool) {
	st := g.state
	st.mu.Lock()
	locked := true
	defer func() {
		if locked {
			st.mu.Unlock()
		}
	}()
	clockNow := g.clock.Now()
	now := clockNow.UnixMilli()
	grown := g.grown.Take()
	for _, it := range grown {
		// Cleared before the counts are read: a request after this
		// queues the cell again.
		it.C.Flags.And(^cells.Grown)
	}
	var cands []flushCandidate
	if full {
		st.lastFullFlush = clockNow
		// Concurrency limits are published as the region holds them, read
		// first (see slotCells), after the walk.
		var slots []*cells.Window
		candidates := func(w *cells.Window) {
			a, b := w.Cells[0].Load(), w.Cells[1].Load()
			ahead := w.Next.Load() // a cell made ahead of its window, if not in a slot
			if ahead == a || ahead == b {
				ahead = nil
			}
			for _, c := range [3]*cells.Cell{a, b, ahead} {
				if c != nil && c.Flags.Load()&cells.Marked != 0 {
					c.Flags.And(^cells.Marked) // marked again at its next replay
				}
				if cand, ok := g.flushCandidate(w, c, now, false); ok {
					cands = append(cands, cand)
				}
			}
		}
		g.table.ForEach(func(w *cells.Window) {
			if g.readSlots != nil && pool.IsCell(w.Period()) {
				slots = append(slots, w)
				return
			}
			candidates(w)
		})
		if len(slots) > 0 {
			var mains []*cells.Window // one window of each pool, to read it by
			read := map[*pool.Group]bool{}
			for _, w := range slots {
				if pg := g.pools.Of(w); pool.IsPool(w) && pg != nil && !read[pg] {
					read[pg] = true
					mains = append(mains, w)
				}
			}
			g.readSlots(ctx, mains, now)
			for _, w := range slots {
				candidates(w)
			}
		}
		for c, f := range st.flushed {
			if f.expiresAt <= now {
				delete(st.flushed, c)
			}
		}
	} else {
		slots := g.slotCells(ctx, grown, now)
		for _, it := range grown {
			if _, whole := slots[it.C]; whole {
				continue
			}
			if cand, ok := g.flushCandidate(it.W, it.C, now, true); ok {
				cands = append(cands, cand)
			}
		}
		for c, w := range slots {
			if cand, ok := g.flushCandidate(w, c, now, false); ok {
				cands = append(cands, cand)
			}
		}
	}
	if len(cands) == 0 {
		return
	}
	// Unique-key order, so that concurrent upserts from the processes of a
	// region lock rows in the same order and cannot deadlock each other.
	slices.SortFunc(cands, func(a, b flushCandidate) int { return store.CompareKeys(&a.count.Key, &b.count.Key) })
	counts := make([]store.CellCount, len(cands))
	for i := range cands {
		counts[i] = cands[i].count
	}
	st.mu.Unlock() // the sync loop imports while the store is written
	locked = false
	// A flush under way when the loops stop is cancelled: the last full
	// flush, which carries everything it would have, runs right after.
	ctx, cancel := context.WithTimeout(ctx, g.every.FlushTimeout)
	defer cancel()
	var written int
	_, err := g.flushBreaker.Execute(func() (any, error) {
		var err error
		written, err = g.store.Publish(ctx, g.region, counts)
		return nil, err
	})
	st.mu.Lock()
	locked = true
	for i := 0; i < written && i < len(cands); i++ {
		if st.flushed[cands[i].c].count < cands[i].count.Count { // a sync may have read more meanwhile
			st.flushed[cands[i].c] = flushedCount{count: cands[i].count.Count, expiresAt: cands[i].count.Key.ExpiresAt()}
		}
	}
	g.metrics.Writes.Add(float64(written))
	if err != nil {
		g.metrics.WriteErrors.Inc()
		g.logger.Warn("flush window counts", "error", err, "written", written, "of", len(counts))
	}
}

// PublishIdle publishes the cells of the region that no process marked in
// the regional store's index for idleAfter (see store.Unpublished), with
// the count the regional store holds: what a process that died, or stopped
// while the global store was down, counted and could not publish, reaches
// the other regions by the flush of any process of the region, or of the
// next to start. Every marked cell goes this way once its counter stops
// marking it (at the latest when its window ends), so a cell of a live
// process is published once more: a max-merge, so twice is harmless, but
// a write. Cells of a node that failed wait for the next full flush; the
// others are dropped from the index once published (or found expired or
// empty). Marks carry the marking process's clock, the cut-off this
// process's: clocks apart by seconds only shift idleAfter by as much.
//
// The index fills at the rate new cells are marked (a caller may make one a
// request), so a flush drains it in batches of MaxIdlePerFlush until a
// batch comes back short, up to MaxIdleRounds of them within the flush's
// timeout: at one batch a flush, 300,000 one-request windows left 269,130
// marks behind long after their cells expired.
func (g *Tier) PublishIdle(ctx context.Context) {
	if g.unpublished == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, g.every.FlushTimeout)
	defer cancel()
	for range MaxIdleRounds {
		if n := g.publishIdleBatch(ctx); n < MaxIdlePerFlush || ctx.Err() != nil {
			return
		}
	}
}

// publishIdleBatch publishes one batch of idle cells, and returns how many
// the index gave (0 after an error that left nothing to do).
func (g *Tier) publishIdleBatch(ctx context.Context) int {
	now := g.clock.Now()
	idle, err := g.unpublished.Idle(ctx, now.Add(-g.idleAfter()), MaxIdlePerFlush)
	if err != nil {
		g.logger.Warn("read idle cells from the regional store", "error", err, "read", len(idle))
	}
	if len(idle) == 0 {
		return 0
	}
	read := len(idle)
	nowMs := now.UnixMilli()
	var counts []store.CellCount
	done := idle[:0]
	for _, c := range idle {
		switch {
		case c.Count < 0:
			continue // its node failed: next time
		case c.Count > 0 && c.Key.ExpiresAt() > nowMs:
			counts = append(counts, c.CellCount)
		}
		done = append(done, c)
	}
	if len(counts) > 0 {
		slices.SortFunc(counts, func(a, b store.CellCount) int { return store.CompareKeys(&a.Key, &b.Key) })
		var written int
		_, err := g.flushBreaker.Execute(func() (any, error) {
			var err error
			written, err = g.store.Publish(ctx, g.region, counts)
			return nil, err
		})
		g.metrics.Writes.Add(float64(written))
		g.metrics.IdlePublished.Add(float64(written))
		if err != nil {
			g.metrics.WriteErrors.Inc()
			g.logger.Warn("publish idle cells", "error", err, "written", written, "of", len(counts))
			return 0 // kept in the index: the next full flush tries again
		}
	}
	if err := g.unpublished.Forget(ctx, done); err != nil {
		g.logger.Warn("drop published cells from the regional store's index", "error", err)
		return 0
	}
	if len(done) == 0 {
		return 0 // every cell's node failed: nothing drained, no point in another round
	}
	return read
}

// flushCandidate returns what to publish of c, a cell of w, at now (unix
// ms): its committed count, if c can still affect a decision, is worth
// sharing and grew since the store last held it; for a prompt flush, if it
// was never published or grew by at least a flush step.
func (g *Tier) flushCandidate(w *cells.Window, c *cells.Cell, now int64, prompt bool) (flushCandidate, bool) {
	if c == nil || c.Seq() < w.SeqOf(now)-1 {
		return flushCandidate{}, false
	}
	limit := w.Limit.Load()
	floor := g.cellFloor(w, limit)
	// Utilization filter first: most cells never cross the floor. Refunds
	// are shared whatever their size, like a cell another region holds.
	shared := c.Global.Load() > 0 || sharedRefunds(w, c)
	if c.Count.Load() < floor && !shared {
		return flushCandidate{}, false
	}
	n, ok := w.Committed(c)
	if !ok || n <= 0 || (n < floor && !shared) {
		return flushCandidate{}, false
	}
	last := g.state.flushed[c].count
	if last >= n {
		return flushCandidate{}, false // change filter
	}
	if !shared && last > 0 && n < halfFloor(limit) && floor > 1 {
		// Its presence is published and no other region holds it: below
		// half the limit no region can push another over by itself, so
		// the growth waits, and a key of one region costs one row more
		// than before the presence floor, not a row per step.
		return flushCandidate{}, false
	}
	if prompt && last > 0 && n-last < g.FlushStep(limit, n, c.Global.Load()) {
		return flushCandidate{}, false // small growth waits for the full flush
	}
	return flushCandidate{c: c, count: store.CellCount{Key: w.CellKey(c.Seq()), Count: n, Limit: limit}}, true
}

// slotCells returns, for the concurrency limits among the grown cells,
// every cell of their pools that counts now (each live cell and its
// refunds), read from the regional store first: a prompt flush publishes
// them together, whatever their growth, as the region holds them. A
// release and the re-take of its slot are often made by two processes of
// the region, each flushing on its own clock; published apart, another
// region would see the slot free in between and take it too.
func (g *Tier) slotCells(ctx context.Context, grown []cells.Ref, now int64) map[*cells.Cell]*cells.Window {
	var pools []*pool.Group
	var firsts []*cells.Window // one window of each pool, to read it by
	for _, it := range grown {
		if !pool.IsCell(it.W.Period()) {
			continue
		}
		w := it.W
		if w.HoldsRefunds() {
			k := w.Key().Owner()
			if w = g.table.Find(&k); w == nil {
				continue
			}
		}
		if pg := g.pools.Of(w); pg != nil && !slices.Contains(pools, pg) {
			pools = append(pools, pg)
			firsts = append(firsts, w)
		}
	}
	if len(pools) == 0 {
		return nil
	}
	if g.readSlots != nil {
		g.readSlots(ctx, firsts, now)
	}
	out := map[*cells.Cell]*cells.Window{}
	for _, pg := range pools {
		for _, pc := range pg.Live(now) {
			seq, _ := pool.CellOf(pc.W)
			if c := pc.W.Cells[seq&1].Load(); c != nil && c.Seq() == seq {
				out[c] = pc.W
			}
			if pc.Refunds != nil {
				if c := pc.Refunds.Cells[seq&1].Load(); c != nil && c.Seq() == seq {
					out[c] = pc.Refunds
				}
			}
		}
	}
	return out
}

// Sync imports what the store holds: the other regions' sum becomes
// each cell's imported count (raised, never lowered), and this region's own
// component raises the regional count, since another process of the region
// may have published more than this one knows. It reads only the cells that
// changed since the previous sync began by the store's clock (less
// SyncLookback), and every live cell on the first sync and every
// FullSyncInterval after.
func (g *Tier) Sync(ctx context.Context) {
	st := g.state
	// A sync under way when the loops stop is cancelled: nothing would use
	// what it read.
	ctx, cancel := context.WithTimeout(ctx, g.every.SyncTimeout)
	defer cancel()
	now := g.clock.Now()
	var since time.Time
	if !st.lastFull.IsZero() && now.Sub(st.lastFull) < FullSyncInterval {
		since = st.syncedAsOf.Add(-SyncLookback)
	}
	type synced struct {
		rows []store.GlobalCount
		asOf time.Time
	}
	res, err := g.syncBreaker.Execute(func() (any, error) {
		rows, asOf, err := g.store.Sync(ctx, g.region, now, since)
		return synced{rows, asOf}, err
	})
	if err != nil {
		g.metrics.SyncErrors.Inc()
		g.logger.Warn("sync window counts", "error", err)
		return
	}
	st.syncedAsOf = res.(synced).asOf
	g.lastSync.Store(now.UnixMilli())
	g.metrics.LastSync.Set(float64(now.UnixMilli()) / 1000)
	if since.IsZero() {
		st.lastFull = now
	}
	rows := res.(synced).rows
	g.metrics.RowsLastPoll.Set(float64(len(rows)))
	applied := 0
	nowMs := now.UnixMilli()
	st.mu.Lock()
	for i := range rows {
		if g.apply(&rows[i], nowMs) {
			applied++
		}
	}
	st.mu.Unlock()
	g.metrics.RowsApplied.Add(float64(applied))
}

// apply imports one row at now (unix ms), with g.state.mu held, and
// reports whether it reached a cell.
//
// A row more than one window ahead of now is ignored and counted: no clock
// of a healthy region runs a whole window ahead, and importing it would
// replace the current cell and reset the key's budget.
//
// For a key the process holds no window for, a window is created only when
// the other regions' sum reaches the floor of the limit they
// published with, and only within the workspace's cap: keys that are only
// shared, or only this region's own, would cost every process of the region
// memory for nothing (the region's own count reaches a process through the
// regional store when a request comes).
func (g *Tier) apply(row *store.GlobalCount, now int64) bool {
	// The row names its cells by a code. A calendar's holds the code,
	// not the zone: a calendar this process has decided by (for any key)
	// is known by its code; one it never has decides nothing here.
	code := row.Key.Duration.Milliseconds()
	p, ok := period.FromCode(code)
	if !ok {
		if code > 0 && row.Key.Sequence > period.LatestOfCode(code, now) {
			g.metrics.RowsFuture.Inc() // a calendar's, whatever its zone
		}
		return false
	}
	if row.Key.Sequence > p.Latest(now) {
		g.metrics.RowsFuture.Inc()
		return false
	}
	if p.Kind() == period.Given && !row.Key.Refunds {
		return false // given tokens are refunds alone: nothing counts in the row's other half
	}
	k := cells.Key{Workspace: row.Key.Workspace, Namespace: row.Key.Namespace, Identifier: row.Key.Identifier,
		Period: p, Refunds: row.Key.Refunds}
	var main *cells.Window
	if k.Refunds {
		if main = g.reserve(&k, row.Key.Sequence); main == nil {
			return false
		}
	}
	w := g.table.Find(&k)
	if w == nil {
		floor := g.importFloor(p, row.OthersLimit)
		if pool.IsCell(p) && g.pools.Holds(&k) {
			// A cell of a pool this process decides: what it holds
			// counts in every decision on the pool, however little.
			floor = 1
		}
		if !k.Refunds && (row.Others <= 0 || row.Others < floor) {
			return false
		}
		var created bool
		var err error
		w, created, err = g.table.FindOrCreate(&k)
		if err != nil {
			g.metrics.Rejected.Inc()
			return false
		}
		if created {
			g.metrics.EntriesCreated.Inc()
		}
	}
	if main != nil {
		w.ObserveLimit(main.Limit.Load()) // what its refunds are published with
	}
	c := w.CellFor(row.Key.Sequence, now, g.hydrated)
	if c == nil {
		return false // the window already moved past this cell
	}
	others := min(row.Others, store.MaxCount)
	g.models.Raise(w, c, &c.Global, others, now)
	if own := min(row.Own, store.MaxCount); own > 0 {
		n := own + c.Speculative.Load()
		g.models.Raise(w, c, &c.Count, n, now)
		if f := g.state.flushed[c]; f.count < own {
			g.state.flushed[c] = flushedCount{count: own, expiresAt: p.ExpiresAt(c.Seq())}
		}
	}
	return true
}

// reserve marks the cell seq of the key whose refunds k names (see
// cells.Key.Owner) as reserved, so that decisions weigh the refunds a sync
// imports for it, and returns the key's window, or nil if the process does
// not hold that cell: refunds of a key without a window here are of no
// decision's concern. The tokens given back to a token bucket need only
// its window: its level carries from cell to cell, and another region may
// give back in a cell this process has not counted in yet.
func (g *Tier) reserve(k *cells.Key, seq int64) *cells.Window {
	key := k.Owner()
	w := g.table.Find(&key)
	if w == nil || k.Period.Kind() == period.Given {
		return w
	}
	c := w.Cells[seq&1].Load()
	if c == nil || c.Seq() != seq {
		return nil
	}
	c.Flags.Or(cells.Reserved)
	return w
}

package ratelimit

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sony/gobreaker/v2"
)

// globalState is the global loop's own bookkeeping. Only the goroutine that
// runs the loop touches it.
type globalState struct {
	// flushed is, per cell, the count the store is known to hold for this
	// region: what the last successful flush wrote, or the own component a
	// sync read back. The change filter skips cells that have not grown past
	// it. Keeping it here rather than in every cell keeps cells small; only
	// cells above the utilization floor ever get an entry.
	flushed map[*cell]flushedCount
	// lastFull is when the latest sync that read every live row began, and
	// lastFullFlush when the latest flush that walked every window did, by
	// the limiter's clock. Zero before the first.
	lastFull, lastFullFlush time.Time
	// syncedAsOf is the store's time when the latest successful sync began:
	// where the next incremental one starts (less globalSyncLookback). The
	// store's clock, not this process's: only it orders the rows' stamps.
	syncedAsOf time.Time
}

func newGlobalState() *globalState {
	return &globalState{flushed: map[*cell]flushedCount{}}
}

type flushedCount struct {
	count     int64
	expiresAt int64 // unix ms after which the cell no longer counts anywhere
}

// newGlobalBreaker returns the circuit breaker that guards the global
// store, so that a sick database fails the next tick fast instead of
// blocking it for globalFlushTimeout. sony/gobreaker is maintained, small
// and generic over the result type.
func (s *Service) newGlobalBreaker() *gobreaker.CircuitBreaker[any] {
	return gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        "ratelimit-global",
		MaxRequests: 1,
		Timeout:     globalBreakerProbe,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= globalBreakerFailures },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			s.logger.Warn("global store circuit breaker changed state", "from", from.String(), "to", to.String())
		},
	})
}

// runGlobal flushes and syncs on their jittered schedules until ctx is done,
// then flushes every grown cell once more so that what this region counted
// is published before the process exits.
func (s *Service) runGlobal(ctx context.Context) {
	st := newGlobalState()
	iv := s.globalEvery
	anchor := s.clock.Now()
	flushTimer := time.NewTimer(untilNextTick(anchor, s.clock.Now(), iv.flush))
	syncTimer := time.NewTimer(untilNextTick(anchor, s.clock.Now(), iv.sync))
	defer flushTimer.Stop()
	defer syncTimer.Stop()
	for {
		select {
		case <-ctx.Done():
			s.flushGlobal(context.Background(), st, true)
			return
		case <-flushTimer.C:
			s.flushGlobal(ctx, st, s.fullFlushDue(st))
			flushTimer.Reset(untilNextTick(anchor, s.clock.Now(), iv.flush))
		case <-syncTimer.C:
			s.syncGlobal(ctx, st)
			syncTimer.Reset(untilNextTick(anchor, s.clock.Now(), iv.sync))
		}
	}
}

// fullFlushDue reports whether the next flush should walk every window: the
// full flush interval has passed since the last one, less half a prompt
// interval so that jitter does not push it one prompt tick late.
func (s *Service) fullFlushDue(st *globalState) bool {
	iv := s.globalEvery
	return st.lastFullFlush.IsZero() || s.clock.Now().Sub(st.lastFullFlush) >= iv.fullFlush-iv.flush/2
}

// untilNextTick returns how long to wait at now for the next tick of a
// schedule that fires once per interval at anchor + k·interval, each tick
// jittered by up to globalSyncJitter of the interval. Targets are absolute,
// so a slow tick does not shift the ones after it, and a missed target is
// skipped. Both times are the limiter's clock's.
func untilNextTick(anchor, now time.Time, interval time.Duration) time.Duration {
	k := now.Sub(anchor)/interval + 1
	target := anchor.Add(k * interval)
	jitter := time.Duration(rand.Float64() * globalSyncJitter * float64(interval))
	return target.Add(jitter).Sub(now)
}

// utilizationFloor is the count of a cell of limit and window durationMs
// from which a region publishes it: a twentieth of the limit for windows of
// a minute or more (globalPresenceFloor), half of it for shorter ones.
func (s *Service) utilizationFloor(limit, durationMs int64) int64 {
	share := globalUtilizationFloor
	if !s.halfFloorOnly && durationMs >= globalPresenceMinWindow.Milliseconds() {
		share = globalPresenceFloor
	}
	return max(1, int64(math.Ceil(float64(limit)*share)))
}

// flushStep is the growth of a published cell of limit that makes it due at
// the next prompt flush: a tenth of the limit, scaled by twice this region's
// share of the cell's count (own of own + others) when that is under one.
// Each region's unpublished growth then lags the others' view by at most
// twice its share of a tenth, so all regions together by a fifth, however
// many share the key; a region with a small share writes about as often as
// one with a large one. Two regions sharing a key evenly keep the step of a
// tenth: they were within 1.2× the limit already.
func (s *Service) flushStep(limit, own, others int64) int64 {
	step := float64(limit) * globalFlushStep
	if !s.halfFloorOnly && others > 0 && own > 0 {
		step *= min(1, 2*float64(own)/float64(own+others))
	}
	return max(1, int64(math.Ceil(step)))
}

// noteGrowth queues c, the cell of w a request just counted into with limit,
// for the next prompt flush if it is worth sharing: at or above the
// utilization floor, or already shared by another region. A queued cell
// costs later requests one atomic load until the flush takes it; one below
// the floor costs three.
func (s *Service) noteGrowth(w *window, c *cell, limit int64) {
	if c.flags.Load()&cellGrown != 0 {
		return
	}
	if c.count.Load() < s.utilizationFloor(limit, w.durationMs) && c.global.Load() == 0 {
		return
	}
	if c.flags.Or(cellGrown)&cellGrown != 0 {
		return
	}
	if !s.grown.push(cellRef{w: w, c: c}) {
		// Its next request queues it again; the full flush publishes it
		// meanwhile.
		c.flags.And(^cellGrown)
		s.metrics.queueOverflow.WithLabelValues("flush").Inc()
	}
}

// flushCandidate is one cell a flush publishes.
type flushCandidate struct {
	c     *cell
	count CellCount
	exp   int64
}

// flushGlobal publishes this region's count of the cells worth sharing: a
// cell this region has used at least its floor of (utilizationFloor), or one
// that another region already published (so that traffic spread thinly over
// many regions is still shared), and only if it grew since the store last
// held it; a cell no other region holds publishes its presence at the floor
// and nothing more until half the limit. A prompt flush (full false) looks
// only at the cells requests counted into since the last flush, and
// publishes those that crossed the floor or grew by a flush step; a full one
// walks every window and publishes any growth. Speculative batch increments are never published. The store's
// record of a cell is updated only once the write succeeded, so a failed
// flush is retried: at the next full flush, or the next prompt one if a
// request counts into the cell again.
func (s *Service) flushGlobal(ctx context.Context, st *globalState, full bool) {
	clockNow := s.clock.Now()
	now := clockNow.UnixMilli()
	grown := s.grown.take()
	for _, it := range grown {
		// Cleared before the counts are read: a request after this
		// queues the cell again.
		it.c.flags.And(^cellGrown)
	}
	var cands []flushCandidate
	if full {
		st.lastFullFlush = clockNow
		s.forEachWindow(func(w *window) {
			for i := range w.cells {
				if cand, ok := s.flushCandidate(w, w.cells[i].Load(), st, now, false); ok {
					cands = append(cands, cand)
				}
			}
		})
		for c, f := range st.flushed {
			if f.expiresAt <= now {
				delete(st.flushed, c)
			}
		}
	} else {
		for _, it := range grown {
			if cand, ok := s.flushCandidate(it.w, it.c, st, now, true); ok {
				cands = append(cands, cand)
			}
		}
	}
	if len(cands) == 0 {
		return
	}
	// Unique-key order, so that concurrent upserts from the processes of a
	// region lock rows in the same order and cannot deadlock each other.
	slices.SortFunc(cands, func(a, b flushCandidate) int { return compareCells(&a.count.Cell, &b.count.Cell) })
	counts := make([]CellCount, len(cands))
	for i := range cands {
		counts[i] = cands[i].count
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), globalFlushTimeout)
	defer cancel()
	var written int
	_, err := s.globalBreaker.Execute(func() (any, error) {
		var err error
		written, err = s.global.Publish(ctx, s.region, counts)
		return nil, err
	})
	for i := 0; i < written && i < len(cands); i++ {
		st.flushed[cands[i].c] = flushedCount{count: cands[i].count.Count, expiresAt: cands[i].exp}
	}
	s.metrics.globalWrites.Add(float64(written))
	if err != nil {
		s.metrics.globalWriteErrors.Inc()
		s.logger.Warn("flush window counts", "error", err, "written", written, "of", len(counts))
	}
}

// flushCandidate returns what to publish of c, a cell of w, at now (unix
// ms): its committed count, if c can still affect a decision, is worth
// sharing and grew since the store last held it; for a prompt flush, if it
// was never published or grew by at least a flush step.
func (s *Service) flushCandidate(w *window, c *cell, st *globalState, now int64, prompt bool) (flushCandidate, bool) {
	if c == nil || c.seq < now/w.durationMs-1 {
		return flushCandidate{}, false
	}
	limit := w.limit.Load()
	floor := s.utilizationFloor(limit, w.durationMs)
	// Utilization filter first: most cells never cross the floor.
	shared := c.global.Load() > 0
	if c.count.Load() < floor && !shared {
		return flushCandidate{}, false
	}
	n, ok := w.committed(c)
	if !ok || n <= 0 || (n < floor && !shared) {
		return flushCandidate{}, false
	}
	last := st.flushed[c].count
	if last >= n {
		return flushCandidate{}, false // change filter
	}
	if !shared && last > 0 && n < int64(math.Ceil(float64(limit)*globalUtilizationFloor)) {
		// Its presence is published and no other region holds it: below
		// half the limit no region can push another over by itself, so
		// the growth waits, and a key of one region costs one row more
		// than before the presence floor, not a row per step.
		return flushCandidate{}, false
	}
	if prompt && last > 0 && n-last < s.flushStep(limit, n, c.global.Load()) {
		return flushCandidate{}, false // small growth waits for the full flush
	}
	return flushCandidate{c: c, count: CellCount{Cell: w.cell(c.seq), Count: n, Limit: limit},
		exp: (c.seq + 2) * w.durationMs}, true
}

// syncGlobal imports what the store holds: the other regions' sum becomes
// each cell's imported count (raised, never lowered), and this region's own
// component raises the regional count, since another process of the region
// may have published more than this one knows. It reads only the cells that
// changed since the previous sync began by the store's clock (less
// globalSyncLookback), and every live cell on the first sync and every
// globalFullSyncInterval after.
func (s *Service) syncGlobal(ctx context.Context, st *globalState) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), globalFlushTimeout)
	defer cancel()
	now := s.clock.Now()
	var since time.Time
	if !st.lastFull.IsZero() && now.Sub(st.lastFull) < globalFullSyncInterval {
		since = st.syncedAsOf.Add(-globalSyncLookback)
	}
	type synced struct {
		rows []GlobalCount
		asOf time.Time
	}
	res, err := s.globalBreaker.Execute(func() (any, error) {
		rows, asOf, err := s.global.Sync(ctx, s.region, now, since)
		return synced{rows, asOf}, err
	})
	if err != nil {
		s.metrics.globalSyncErrors.Inc()
		s.logger.Warn("sync window counts", "error", err)
		return
	}
	st.syncedAsOf = res.(synced).asOf
	if since.IsZero() {
		st.lastFull = now
	}
	rows := res.(synced).rows
	s.metrics.globalRowsLastPoll.Set(float64(len(rows)))
	applied := 0
	nowMs := now.UnixMilli()
	for i := range rows {
		if s.applyGlobal(&rows[i], st, nowMs) {
			applied++
		}
	}
	s.metrics.globalRowsApplied.Add(float64(applied))
}

// applyGlobal imports one row at now (unix ms) and reports whether it
// reached a cell.
//
// A row more than one window ahead of now is ignored and counted: no clock
// of a healthy region runs a whole window ahead, and importing it would
// replace the current cell and reset the key's budget.
//
// For a key the process holds no window for, a window is created only when
// the other regions' sum reaches the utilization floor of the limit they
// published with, and only within the workspace's cap: keys that are only
// shared, or only this region's own, would cost every process of the region
// memory for nothing (the region's own count reaches a process through the
// regional origin when a request comes).
func (s *Service) applyGlobal(row *GlobalCount, st *globalState, now int64) bool {
	durMs := row.Cell.Duration.Milliseconds()
	if durMs <= 0 {
		return false
	}
	if row.Cell.Sequence > now/durMs+1 {
		s.metrics.globalRowsFuture.Inc()
		return false
	}
	k := windowKey{workspace: row.Cell.Workspace, namespace: row.Cell.Namespace, identifier: row.Cell.Identifier, durationMs: durMs}
	w := s.findWindow(&k)
	if w == nil {
		if row.Others <= 0 || row.Others < s.utilizationFloor(row.OthersLimit, durMs) {
			return false
		}
		var created bool
		var err error
		w, created, err = s.loadOrCreate(&k, s.hashKey(k, s.seed))
		if err != nil {
			s.metrics.windowsRejected.WithLabelValues("sync").Inc()
			return false
		}
		if created {
			s.metrics.globalEntriesCreated.Inc()
		}
	}
	c, _ := w.cellAt(row.Cell.Sequence, s.origin == nil)
	if c == nil {
		return false // the window already moved past this cell
	}
	atomicMax(&c.global, min(row.Others, MaxStoredCount))
	if own := min(row.Own, MaxStoredCount); own > 0 {
		atomicMax(&c.count, own+c.speculative.Load())
		if f := st.flushed[c]; f.count < own {
			st.flushed[c] = flushedCount{count: own, expiresAt: (c.seq + 2) * durMs}
		}
	}
	return true
}

// compareCells orders cells as the store's unique key does: workspace,
// namespace, identifier, duration, sequence (byte order, as utf8mb4_bin).
func compareCells(a, b *Cell) int {
	return cmp.Or(
		cmp.Compare(a.Workspace, b.Workspace),
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Identifier, b.Identifier),
		cmp.Compare(a.Duration, b.Duration),
		cmp.Compare(a.Sequence, b.Sequence),
	)
}

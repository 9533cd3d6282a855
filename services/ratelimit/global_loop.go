package ratelimit

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"time"
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
	// lastSync is when the latest successful sync began, by the limiter's
	// clock; lastFull when the latest one that read every live row did.
	// Zero before the first.
	lastSync, lastFull time.Time
}

type flushedCount struct {
	count     int64
	expiresAt int64 // unix ms after which the cell no longer counts anywhere
}

// runGlobal flushes and syncs on their jittered schedules until ctx is done,
// then flushes once more so that what this region counted is published
// before the process exits.
func (s *Service) runGlobal(ctx context.Context) {
	st := &globalState{flushed: map[*cell]flushedCount{}}
	anchor := time.Now()
	flushTimer := time.NewTimer(untilNextTick(anchor, globalFlushInterval))
	syncTimer := time.NewTimer(untilNextTick(anchor, globalSyncInterval))
	defer flushTimer.Stop()
	defer syncTimer.Stop()
	for {
		select {
		case <-ctx.Done():
			s.flushGlobal(context.Background(), st)
			return
		case <-flushTimer.C:
			s.flushGlobal(ctx, st)
			flushTimer.Reset(untilNextTick(anchor, globalFlushInterval))
		case <-syncTimer.C:
			s.syncGlobal(ctx, st)
			syncTimer.Reset(untilNextTick(anchor, globalSyncInterval))
		}
	}
}

// untilNextTick returns how long to wait for the next tick of a schedule
// that fires once per interval at anchor + k·interval, each tick jittered by
// up to globalSyncJitter of the interval. Targets are absolute, so a slow
// tick does not shift the ones after it, and a missed target is skipped.
func untilNextTick(anchor time.Time, interval time.Duration) time.Duration {
	now := time.Now()
	k := now.Sub(anchor)/interval + 1
	target := anchor.Add(k * interval)
	jitter := time.Duration(rand.Float64() * globalSyncJitter * float64(interval))
	return target.Add(jitter).Sub(now)
}

// flushGlobal publishes this region's count of every cell worth sharing: a
// cell this region has used at least globalUtilizationFloor of, or one that
// another region already published (so that traffic spread thinly over many
// regions is still shared), and only if it grew since the store last held
// it. Speculative batch increments are never published. The store's record
// of a cell is updated only once the write succeeded, so a failed flush is
// retried on the next tick.
func (s *Service) flushGlobal(ctx context.Context, st *globalState) {
	now := s.clock.Now().UnixMilli()
	type candidate struct {
		c     *cell
		count CellCount
		exp   int64
	}
	var cands []candidate
	s.forEachWindow(func(w *window) {
		floor := int64(math.Ceil(float64(w.limit.Load()) * globalUtilizationFloor))
		current := now / w.durationMs
		for i := range w.cells {
			c := w.cells[i].Load()
			if c == nil || c.seq < current-1 {
				continue
			}
			// Utilization filter first: most cells never cross the floor.
			shared := c.global.Load() > 0
			if c.count.Load() < floor && !shared {
				continue
			}
			n, ok := w.committed(c)
			if !ok || n <= 0 || (n < floor && !shared) {
				continue
			}
			if st.flushed[c].count >= n {
				continue // change filter
			}
			cands = append(cands, candidate{c: c, count: CellCount{Cell: w.cell(c.seq), Count: n, Limit: w.limit.Load()},
				exp: (c.seq + 2) * w.durationMs})
		}
	})
	for c, f := range st.flushed {
		if f.expiresAt <= now {
			delete(st.flushed, c)
		}
	}
	if len(cands) == 0 {
		return
	}
	// Unique-key order, so that concurrent upserts from the processes of a
	// region lock rows in the same order and cannot deadlock each other.
	slices.SortFunc(cands, func(a, b candidate) int { return compareCells(&a.count.Cell, &b.count.Cell) })
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

// syncGlobal imports what the store holds: the other regions' sum becomes
// each cell's imported count (raised, never lowered), and this region's own
// component raises the regional count, since another process of the region
// may have published more than this one knows. It reads only the cells that
// changed since the previous sync (less globalSyncLookback), and every live
// cell on the first sync and every globalFullSyncInterval after.
func (s *Service) syncGlobal(ctx context.Context, st *globalState) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), globalFlushTimeout)
	defer cancel()
	now := s.clock.Now()
	var since time.Time
	if !st.lastFull.IsZero() && now.Sub(st.lastFull) < globalFullSyncInterval {
		since = st.lastSync.Add(-globalSyncLookback)
	}
	res, err := s.globalBreaker.Execute(func() (any, error) { return s.global.Sync(ctx, s.region, now, since) })
	if err != nil {
		s.metrics.globalSyncErrors.Inc()
		s.logger.Warn("sync window counts", "error", err)
		return
	}
	st.lastSync = now
	if since.IsZero() {
		st.lastFull = now
	}
	rows := res.([]GlobalCount)
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
		floor := int64(math.Ceil(float64(row.OthersLimit) * globalUtilizationFloor))
		if row.Others <= 0 || row.Others < floor {
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

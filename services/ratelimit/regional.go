package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"time"
	"unsafe"
)

// Operations on the regional origin, as metric labels.
const (
	opCold        = "cold"     // hydrate a cell this process has not seen
	opAged        = "aged"     // re-read a window whose copy is older than maxCopyAge
	opStrict      = "strict"   // refresh a strict window before deciding
	opStale       = "stale"    // refresh a warm window in the background
	opReplay      = "replay"   // add accepted increments
	resultOK      = "ok"       // the origin answered for every cell
	resultPartial = "partial"  // the origin answered for some cells only
	resultErr     = "error"    // the origin failed or timed out
	resultRej     = "rejected" // the origin's breaker is open: nothing was sent
)

// callOrigin runs call with a timeout and records the operation's outcome
// and latency: ok, partial (some cells failed), rejected (the origin knew
// its server was down and sent nothing) or error.
func (s *Service) callOrigin(ctx context.Context, op string, timeout time.Duration, call func(context.Context) ([]int64, error)) ([]int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	start := time.Now()
	counts, err := call(ctx)
	var partial *PartialError
	switch {
	case err == nil:
		s.metrics.originOps.WithLabelValues(op, resultOK).Inc()
	case errors.As(err, &partial):
		s.metrics.originOps.WithLabelValues(op, resultPartial).Inc()
	case errors.Is(err, ErrUnavailable):
		s.metrics.originOps.WithLabelValues(op, resultRej).Inc()
		return counts, err // nothing was sent: no latency to record
	default:
		s.metrics.originOps.WithLabelValues(op, resultErr).Inc()
	}
	s.metrics.originLatency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	return counts, err
}

// prepare brings w up to date with the origin before a decision at now, as
// far as the decision may wait for it: a cold cell waits for one read (shared
// by every request on it), a strict window refreshes at most once per
// window.strictRefresh, a window whose last read is older than maxCopyAge is
// read again as a cold one is, and a warm window whose last read is older
// than freshnessInterval is refreshed in the background while this request
// decides from memory.
func (s *Service) prepare(ctx context.Context, w *window, now int64) {
	cur, _ := w.cellAt(now/w.durationMs, false)
	if cur == nil {
		return // a stale clock reading: decide handles it
	}
	flags := cur.flags.Load()
	last := w.refreshedAt.Load()
	switch {
	case flags&cellHydrated == 0:
		s.hydrate(ctx, w, cur, opCold)
	case now < w.strictUntil.Load():
		if now-last >= w.strictRefresh() && w.refreshedAt.CompareAndSwap(last, now) {
			s.refreshNow(ctx, []*window{w}, now, opStrict)
		}
	case now-last >= maxCopyAge.Milliseconds():
		// The copy is too old to decide from: make the cell cold again, so
		// that this request and any that race it wait for one read.
		if w.refreshedAt.CompareAndSwap(last, now) {
			cur.flags.And(^cellHydrated)
		}
		s.hydrate(ctx, w, cur, opAged)
	case now-last >= freshnessInterval.Milliseconds():
		if w.refreshedAt.CompareAndSwap(last, now) {
			s.queueRefresh(w)
		}
	}
}

// prepareBatch is prepare for the windows of a batch: every cold or strict
// window is read in one round trip.
func (s *Service) prepareBatch(ctx context.Context, ws []*window, now int64) {
	var sync []*window
	op := opStrict
	for _, w := range ws {
		cur, _ := w.cellAt(now/w.durationMs, false)
		if cur == nil {
			continue
		}
		flags := cur.flags.Load()
		last := w.refreshedAt.Load()
		switch {
		case flags&cellHydrated == 0:
			w.refreshedAt.Store(now)
			sync = append(sync, w)
			op = opCold
		case now < w.strictUntil.Load():
			if now-last >= w.strictRefresh() && w.refreshedAt.CompareAndSwap(last, now) {
				sync = append(sync, w)
			}
		case now-last >= maxCopyAge.Milliseconds():
			if w.refreshedAt.CompareAndSwap(last, now) {
				sync = append(sync, w)
				if op == opStrict {
					op = opAged
				}
			}
		case now-last >= freshnessInterval.Milliseconds():
			if w.refreshedAt.CompareAndSwap(last, now) {
				s.queueRefresh(w)
			}
		}
	}
	if len(sync) > 0 {
		s.refreshNow(ctx, sync, now, op)
	}
}

// hydrate reads a cold cell and its predecessor from the origin, once: every
// request that arrives while the read is under way waits for it (at most
// OriginTimeout) instead of asking again. op names the read in the metrics.
func (s *Service) hydrate(ctx context.Context, w *window, cur *cell, op string) {
	var buf [24]byte
	key := string(strconv.AppendUint(buf[:0], uint64(uintptr(unsafe.Pointer(cur))), 36))
	s.flight.Do(key, func() (any, error) {
		if cur.flags.Load()&cellHydrated == 0 {
			w.refreshedAt.Store(s.clock.Now().UnixMilli())
			s.refreshNow(ctx, []*window{w}, cur.seq*w.durationMs, op)
		}
		return nil, nil
	})
}

// refreshNow is refresh on the request path: bounded by OriginTimeout, and
// a window that could not be read is handed to the background loop to retry.
// The current cells count as hydrated afterwards even if the read failed:
// requests then decide from memory instead of waiting again.
func (s *Service) refreshNow(ctx context.Context, ws []*window, now int64, op string) {
	for _, w := range s.refresh(ctx, ws, now, op, OriginTimeout) {
		s.queueRefresh(w)
	}
	for _, w := range ws {
		if cur, _ := w.cellAt(now/w.durationMs, false); cur != nil {
			cur.flags.Or(cellHydrated)
		}
	}
}

// refresh reads the current and previous cells of ws at now from the origin
// in one round trip, merges what it read, and returns the windows it could
// not read (all of them if the origin failed, those of a server that is
// down if it answered in part).
func (s *Service) refresh(ctx context.Context, ws []*window, now int64, op string, timeout time.Duration) (failed []*window) {
	cells := make([]Cell, 0, 2*len(ws))
	for _, w := range ws {
		seq := now / w.durationMs
		cells = append(cells, w.cell(seq), w.cell(seq-1))
	}
	counts, err := s.callOrigin(ctx, op, timeout, func(ctx context.Context) ([]int64, error) {
		return s.origin.Load(ctx, cells)
	})
	var partial *PartialError
	if err != nil && !errors.As(err, &partial) || len(counts) != len(cells) {
		return ws
	}
	for i, w := range ws {
		cur, prev := counts[2*i], counts[2*i+1]
		if cur < 0 || prev < 0 {
			failed = append(failed, w)
			continue
		}
		seq := now / w.durationMs
		s.merge(w, seq, cur)
		s.merge(w, seq-1, prev)
		if c, _ := w.cellAt(seq, false); c != nil {
			c.flags.Or(cellHydrated)
		}
	}
	return failed
}

// merge raises w's cell of seq to what the origin holds plus what this
// process has not sent it yet. The origin's count includes everything this
// process already replayed; what is still unreplayed or speculative is only
// here. A cell the process has no slot for any more is left alone.
func (s *Service) merge(w *window, seq, origin int64) {
	c := w.cellForMerge(seq, origin)
	if c == nil {
		return
	}
	atomicMax(&c.count, origin+c.unreplayed.Load()+c.speculative.Load())
}

// cellForMerge returns w's cell of seq for an origin count, creating it only
// if the count is not zero: a window with no traffic needs no cell.
func (w *window) cellForMerge(seq, origin int64) *cell {
	if origin <= 0 {
		c := w.cells[seq&1].Load()
		if c == nil || c.seq != seq {
			return nil
		}
		return c
	}
	c, _ := w.cellAt(seq, true)
	return c
}

// afterDecide does the origin's share of decision d on w at now: it queues
// what was counted for replay and keeps the key strict for one duration after
// a denial, or after an admission that left at most strictHeadroom of the
// limit. Near the limit is where processes that are each one admission behind
// the others would together admit too much; strict decisions read the origin
// first.
func (s *Service) afterDecide(w *window, cur *cell, now int64, d *decision, counted int64) {
	if counted > 0 {
		s.queueReplay(w, cur, counted)
	}
	if d.success && float64(d.remaining) > strictHeadroom*float64(d.limit) {
		return
	}
	until := now + w.durationMs
	for {
		old := w.strictUntil.Load()
		if until <= old {
			return
		}
		if w.strictUntil.CompareAndSwap(old, until) {
			if old <= now {
				s.metrics.strictActivations.Inc()
			}
			return
		}
	}
}

// queueReplay records that cost was accepted into c and, if c is not queued
// yet, queues it for the next replay.
func (s *Service) queueReplay(w *window, c *cell, cost int64) {
	c.unreplayed.Add(cost)
	flags := c.flags.Load()
	if flags&cellQueued != 0 {
		return
	}
	if old := c.flags.Or(cellQueued); old&cellQueued != 0 {
		return
	}
	if !s.replays.push(cellRef{w: w, c: c}) {
		// The cell stays unreplayed and unqueued: its next accepted request
		// queues it again.
		c.flags.And(^cellQueued)
		s.metrics.queueOverflow.WithLabelValues("replay").Inc()
	}
}

// queueRefresh queues w for a background read from the origin.
func (s *Service) queueRefresh(w *window) {
	if !s.refreshes.push(w) {
		s.metrics.queueOverflow.WithLabelValues("refresh").Inc()
	}
}

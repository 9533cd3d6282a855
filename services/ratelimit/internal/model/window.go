package model

import (
	"context"
	"sync"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
)

// windowModel is the model of the windows, which count what they admit
// in the cells alone: the sliding window (SlidingWindow), which weighs
// the previous cell by how much of it the sliding window still overlaps
// (see package ratelimit's documentation, and weighted); the fixed window
// (FixedWindow: fixed), which counts each cell from zero, the current one
// alone, as envoyproxy/ratelimit and limitador count; and the calendar
// window (a request that names a calendar: fixed and zones), a fixed
// window whose cells are the calendar's periods in its time zone, which
// first takes what the same identity's period counted in other zones
// (see zones.go). One type with two facts rather than three: they share
// their count, and a call into a model that calls a shared count costs a
// decision another layer of copied arguments and results.
type windowModel struct {
	// fixed: only the current cell counts; a denied request may pass
	// again at its end.
	fixed bool
	// zones: the cells are a calendar's periods, carried between zones.
	zones bool
}

// Prepare is Model.Prepare for the windows: nothing to ready, no bucket.
func (*windowModel) Prepare(context.Context, *Table, *cells.Window, Spec, int64) *Bucket {
	return nil
}

// TakeBack is Model.TakeBack for the windows: they keep nothing beside
// their cells.
func (*windowModel) TakeBack(*Table, *cells.Window, *cells.Cell, Spec, int64) {}

// Count is Model.Count for the windows: the sliding window's weight of
// the previous cell and the current one's count, or the current cell's
// alone.
func (m *windowModel) Count(t *Table, w *cells.Window, _ *Bucket, now int64, sp Spec, cost int64, report, speculative bool) (Decision, *cells.Cell, bool) {
	if m.zones {
		// What other zones' periods counted of this one.
		t.carryZones(w, now)
	}
	// The cells of now, found here rather than through CellsOf, whose
	// call a window's decision, the hottest path, would pay: CellsOf
	// only when another request already moved w past our clock reading.
	hydrated := t.Regional == nil
	seq, start, end := w.SeqAt(now)
	cur, prev, newer := w.CellsAt(seq, hydrated)
	if cur == nil {
		cur, prev, start, end, now = w.CellsOf(w.StartOf(newer), hydrated)
		seq = cur.Seq()
	}
	if m.fixed {
		// Only the current window counts.
		prev = nil
	}
	dur := end - start
	elapsed := now - start
	curGlobal := cur.Global.Load()
	var prevGlobal int64
	curFlags := cur.Flags.Load()
	flags := curFlags
	if prev != nil {
		prevGlobal = prev.Global.Load()
		flags |= prev.Flags.Load()
	}
	if flags&cells.Reserved != 0 {
		// Refunds of settled reservations count against the cells they
		// were given back to (totals are clamped at zero below).
		curRefunds, prevRefunds := t.refundsAt(w, seq)
		curGlobal -= curRefunds
		if prev != nil {
			prevGlobal -= prevRefunds
		}
	}
	d := Decision{Limit: sp.Limit, Capacity: sp.Limit, ResetMs: end}
	limit := sp.Limit
	if report && cost > 0 {
		// Spent already: counted whatever the verdict, up to a cell's
		// cap (cells.AddCapped), so that reports without end never wrap
		// the counter.
		n := cells.AddCapped(&cur.Count, cost)
		prevTotal := prevGlobal
		if prev != nil {
			prevTotal += prev.Count.Load()
		}
		prevTotal = max(prevTotal, 0)
		curTotal := max(n+curGlobal, 0)
		effective := curTotal + weighted(prevTotal, elapsed, dur)
		d.Success = effective <= limit
		d.Remaining = min(max(0, limit-effective), limit)
		if !d.Success {
			// When a request of the same cost would pass (Envoy's next
			// hit, counted over the limit as this one was): 0 when no
			// wait helps, as for any request.
			d.RetryAfter = windowRetry(m.fixed, sp.Limit, elapsed, dur, curTotal, prevTotal, cost)
		}
		return d, cur, true
	}
	// Count by compare-and-swap; after cells.FastCASAttempts lost races, or on
	// a cell another decision holds the lock of, under the key's lock
	// (see cells.Contention): never refused for losing races.
	var held *sync.Mutex
	if curFlags&cells.Contended != 0 {
		held = t.Contention.Lock(cur)
	}
	for attempt := 0; ; attempt++ {
		n := cur.Count.Load()
		curTotal := max(n+curGlobal, 0)
		prevTotal := prevGlobal
		if prev != nil {
			prevTotal += prev.Count.Load()
		}
		prevTotal = max(prevTotal, 0)
		effective := curTotal + weighted(prevTotal, elapsed, dur) + cost
		d.WaitMs = 0 // a race lost may have booked before
		if cost > limit || effective > limit {
			wait, ok := m.book(sp, elapsed, dur, curTotal, prevTotal, cost)
			if !ok {
				d.Success = false // a race lost may have found room before
				d.Remaining = min(max(0, limit-(effective-cost)), limit)
				d.RetryAfter = windowRetry(m.fixed, sp.Limit, elapsed, dur, curTotal, prevTotal, cost)
				cells.Unlock(held, cur)
				return d, cur, false
			}
			// Booked: counted now, in the cell it will be spent in.
			d.WaitMs, effective = wait, limit
		}
		d.Success = true
		d.Remaining = min(limit-effective, limit)
		if cost == 0 {
			cells.Unlock(held, cur)
			return d, cur, false
		}
		if t.BeforeCAS != nil {
			t.BeforeCAS(w, cur, attempt)
		}
		if speculative {
			if w.ApplySpeculative(cur, n, cost) {
				cells.Unlock(held, cur)
				return d, cur, true
			}
		} else if cur.Count.CompareAndSwap(n, n+cost) {
			cells.Unlock(held, cur)
			return d, cur, true
		}
		held = t.Contention.AfterLost(held, cur, attempt)
	}
}

// book returns, for a request of cost that does not fit now, how many ms
// after now it fits if it is counted now, when that is within sp's
// MaxWaitMs and within the current cell: a sliding window's capacity
// frees as its previous cell's weight falls, so a request counted now in
// the current cell holds, at that instant, no more than the limit admits
// (cur + cost + the previous cell's weight then ≤ limit), and every
// request counted after it finds it counted. A fixed window's frees only
// at its end, in a cell that does not exist yet: it books nothing.
func (m *windowModel) book(sp Spec, elapsed, dur, cur, prev, cost int64) (int64, bool) {
	if sp.MaxWaitMs <= 0 || m.fixed || cost < 1 || cost > sp.Limit {
		return 0, false
	}
	budget := sp.Limit - cost - cur
	if budget < 0 {
		return 0, false // not before the next cell
	}
	at := minElapsed(prev, budget, dur)
	if at >= dur || at-elapsed > sp.MaxWaitMs {
		return 0, false
	}
	return max(at-elapsed, 1), true
}

// windowRetry returns how many ms after now a request of cost would pass
// in a window of limit if no other traffic arrived, elapsed ms into its
// current cell of dur ms (see retryAfter): for a fixed window, its end,
// since the next one starts from zero. None when cost exceeds the limit,
// since no wait can help.
func windowRetry(fixed bool, limit, elapsed, dur, cur, prev, cost int64) int64 {
	switch {
	case cost > limit:
		return 0
	case fixed:
		return dur - elapsed
	}
	return retryAfter(elapsed, dur, cur, prev, limit, cost)
}

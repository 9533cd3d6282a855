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
	// again at its end, or at the next window's end when what is booked
	// into it fills it.
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
// the previous cell and the current one's count, with what is booked
// into the next cell, or the current cell's alone. A request that fits
// neither now nor, a sliding window's, later in its cell within its max
// wait is booked into the next cell if it fits there (see bookAhead).
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
	// A sliding window weighs the current cell in the next one: what was
	// booked into the next cell before it begins (see bookAhead) counts
	// in the current one too, so that what the current one admits after
	// it cannot outweigh it when it proceeds. A fixed window's cells
	// count apart.
	var ahead *cells.Cell
	if !m.fixed {
		ahead = w.Lookup(seq + 1)
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
		curTotal := max(n+curGlobal, 0) + heldIn(ahead)
		effective := curTotal + weighted(prevTotal, elapsed, dur)
		d.Success = effective <= limit
		d.Remaining = min(max(0, limit-effective), limit)
		if !d.Success {
			// When a request of the same cost would pass (Envoy's next
			// hit, counted over the limit as this one was): 0 when no
			// wait helps, as for any request.
			d.RetryAfter = m.retry(w, seq, sp.Limit, elapsed, dur, curTotal, heldIn(ahead), prevTotal, cost)
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
		aheadHeld := heldIn(ahead)
		curTotal := max(n+curGlobal, 0) + aheadHeld
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
				cells.Unlock(held, cur)
				if ahead, wait, ok := m.bookAhead(t, w, cur, seq, sp, elapsed, dur, curGlobal, cost, speculative); ok {
					d.Success, d.Remaining, d.WaitMs = true, 0, wait
					return d, ahead, true
				}
				d.Success = false // a race lost may have found room before
				d.Remaining = min(max(0, limit-(effective-cost)), limit)
				d.RetryAfter = m.retry(w, seq, sp.Limit, elapsed, dur, curTotal, aheadHeld, prevTotal, cost)
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
		counted := false
		if speculative {
			counted = w.ApplySpeculative(cur, n, cost)
		} else {
			counted = cur.Count.CompareAndSwap(n, n+cost)
		}
		if counted && !m.fixed {
			// What is booked ahead, if more than this decision counted:
			// a booking made meanwhile that saw the current cell without
			// this count (bookAhead counts, then reads the current cell;
			// this counts, then reads the next: one sees the other).
			// Decide again with it.
			if a := w.Lookup(seq + 1); heldIn(a) > aheadHeld {
				if speculative {
					w.Rollback(cur, cost)
				} else {
					cur.Count.Add(-cost)
				}
				ahead, counted = a, false
			}
		}
		if counted {
			cells.Unlock(held, cur)
			return d, cur, true
		}
		held = t.Contention.AfterLost(held, cur, attempt)
	}
}

// heldIn returns what c, a cell made ahead, holds (this region's count
// and the others'), or 0 for none.
func heldIn(c *cells.Cell) int64 {
	if c == nil {
		return 0
	}
	return max(c.Count.Load()+c.Global.Load(), 0)
}

// book returns, for a request of cost that does not fit now, how many ms
// after now it fits if it is counted now, when that is within sp's
// MaxWaitMs and within the current cell: a sliding window's capacity
// frees as its previous cell's weight falls, so a request counted now in
// the current cell holds, at that instant, no more than the limit admits
// (cur + cost + the previous cell's weight then ≤ limit), and every
// request counted after it finds it counted. A fixed window's frees only
// at its end: it books into the next cell (see bookAhead).
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

// bookAhead books a request of cost that fits neither now nor later in
// cur, w's cell of seq (elapsed ms into its dur ms), into the cell after
// it, made ahead of its window: counted there now, so that every request
// after it finds it counted, and answered the ms until it may proceed,
// within sp's MaxWaitMs. A fixed window's request proceeds when that
// window begins, when it starts from zero: booked while what the next
// cell holds leaves room for it. A sliding window's proceeds when, in
// that window, the current cell's weight has fallen enough: what the next
// cell holds, its cost and the current cell's weight then within the
// limit; and the current cell's own decisions count what the next one
// holds (see Count), so that nothing admitted after the booking outweighs
// it. Not for a calendar, whose next period carries counts between time
// zones when it begins (see zones.go). It returns the cell it counted
// into.
func (m *windowModel) bookAhead(t *Table, w *cells.Window, cur *cells.Cell, seq int64, sp Spec, elapsed, dur, curGlobal, cost int64, speculative bool) (*cells.Cell, int64, bool) {
	until := dur - elapsed // ms until the next cell begins
	if sp.MaxWaitMs < until || m.zones || cost < 1 || cost > sp.Limit {
		return nil, 0, false
	}
	next := w.BookAhead(seq+1, t.Regional == nil)
	if next == nil {
		return nil, 0, false // the window moved on meanwhile
	}
	for {
		n := next.Count.Load()
		budget := sp.Limit - cost - max(n+next.Global.Load(), 0)
		if budget < 0 {
			return nil, 0, false
		}
		var at int64 // ms into the next cell it proceeds at
		if !m.fixed {
			if at = minElapsed(max(cur.Count.Load()+curGlobal, 0), budget, dur); at >= dur {
				return nil, 0, false
			}
		}
		wait := until + at
		if wait > sp.MaxWaitMs {
			return nil, 0, false
		}
		counted := false
		if speculative {
			counted = w.ApplySpeculative(next, n, cost)
		} else {
			counted = next.Count.CompareAndSwap(n, n+cost)
		}
		if !counted {
			continue
		}
		if !m.fixed && minElapsed(max(cur.Count.Load()+curGlobal, 0), budget, dur) > at {
			// The current cell grew meanwhile (see outweighs): its
			// weight holds the booking later. Decide again.
			if speculative {
				w.Rollback(next, cost)
			} else {
				next.Count.Add(-cost)
			}
			continue
		}
		return next, max(wait, 1), true
	}
}

// retry is windowRetry for a request on w's cell seq, with ahead booked
// into the next one: a fixed window reads it here, on a refusal alone,
// since its decisions count it apart.
func (m *windowModel) retry(w *cells.Window, seq, limit, elapsed, dur, cur, ahead, prev, cost int64) int64 {
	if m.fixed {
		ahead = heldIn(w.Lookup(seq + 1))
	}
	return windowRetry(m.fixed, limit, elapsed, dur, cur, ahead, prev, cost)
}

// windowRetry returns how many ms after now a request of cost would pass
// in a window of limit if no other traffic arrived, elapsed ms into its
// current cell of dur ms, with ahead booked into the next cell (see
// retryAfter; a sliding window's cur holds it too): for a fixed window,
// its end, since the next one starts from zero, or the next one's if
// what is booked into it leaves no room. None when cost exceeds the
// limit, since no wait can help.
func windowRetry(fixed bool, limit, elapsed, dur, cur, ahead, prev, cost int64) int64 {
	switch {
	case cost > limit:
		return 0
	case fixed && ahead+cost > limit:
		return 2*dur - elapsed
	case fixed:
		return dur - elapsed
	}
	return retryAfter(elapsed, dur, cur, ahead, prev, limit, cost)
}

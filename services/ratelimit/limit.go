package ratelimit

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
)

// maxEvictionRetries bounds how often a decision starts again because the
// janitor was removing its window. The janitor removes a window only when no
// request used it for two windows, so one retry is the norm.
const maxEvictionRetries = 8

// decision is the outcome of evaluating one request against one window.
type decision struct {
	algorithm Algorithm
	success   bool
	limit     int64
	// capacity is the most remaining can be: a window's limit, a token
	// bucket's burst.
	capacity   int64
	remaining  int64
	resetMs    int64
	retryAfter int64 // ms
}

func (d *decision) response() Response {
	return Response{
		Success:    d.success,
		Limit:      d.limit,
		Remaining:  d.remaining,
		Reset:      time.UnixMilli(d.resetMs),
		RetryAfter: time.Duration(d.retryAfter) * time.Millisecond,
		Algorithm:  d.algorithm,
	}
}

// Limit decides whether req may spend its cost and, on success with a cost
// above zero, counts it. It returns a [*invalid.Error] for a request that
// breaks a rule, and a [*CapacityError] for a new key in a workspace that holds
// the most windows allowed, and counts nothing then. A warm decision does not
// allocate and, unless the key is strict or its copy of the region's counts is
// older than maxCopyAge (see [store.Regional]), does not wait on the network.
func (s *Service) Limit(ctx context.Context, req Request) (Response, error) {
	if err := req.Validate(); err != nil {
		return Response{}, err
	}
	return s.Decide(ctx, req)
}

// Decide is Limit for a request its caller has validated within its
// sender's [Bounds] (up to [OperatorBounds]: a year's rule of Envoy's rate
// limit service, a limit of 0 that blocks): it is not checked again. A
// request path that validates before it applies an override (so that a
// caller's bad values are refused whether or not one applies) calls this,
// and validates once. A limit of 0 denies and counts nothing.
// With a [*CapacityError] the response still holds the limit and the
// window's reset, for the answer.
func (s *Service) Decide(ctx context.Context, req Request) (Response, error) {
	if req.Limit == 0 {
		return blocked(&req, s.clock.Now().UnixMilli()), nil
	}
	key := keyOf(&req)
	sp := specOf(&req)
	now := s.clock.Now().UnixMilli()
	for attempt := range maxEvictionRetries {
		if attempt > 0 {
			// The janitor removed the window as idle at its own clock
			// reading, which may be past ours: the cells of our reading
			// went with it. Decide again now, in the window's current
			// cell, which the new window reads back, rather than in an
			// old one it starts from zero.
			now = s.clock.Now().UnixMilli()
		}
		if resp, done, err := sp.model.decide(ctx, s, &req, &key, sp, now); done {
			return resp, err
		}
	}
	// Unreachable in practice: the janitor kept removing the window under
	// this request. Fail closed.
	return Response{Limit: req.Limit, Reset: resetAt(&req, now), Algorithm: sp.algorithm}, nil
}

// windowFor returns the window of key for a decision at now (unix ms),
// which it makes on first use, and reports whether the janitor read a
// later clock than now: it may have removed, as idle, the window whose
// cells now falls in, and w may be one made since, empty for them. It
// records req's limit as the window's latest. It returns a
// [*CapacityError], and the answer that goes with it, for a new key in a
// workspace that holds the most windows allowed.
func (s *Service) windowFor(key *cells.Key, req *Request, sp spec, now int64) (w *cells.Window, behind bool, resp Response, err error) {
	w, err = s.windows.ForRequest(key)
	if err != nil {
		return nil, false, Response{Limit: req.Limit, Reset: resetAt(req, now), Algorithm: sp.algorithm}, err
	}
	behind = now < s.windows.JanitorNow.Load()
	w.ObserveLimit(req.Limit)
	return w, behind, Response{}, nil
}

// decideInWindow is one attempt of Service.Decide for a model whose
// window's key does not depend on the clock (every model but the
// concurrency limit): m's bucket (see model.prepare), the regional
// store's read, then m's count. carry, when set, runs after the read:
// what the cell learns from beside it (a calendar's other zones).
func (s *Service) decideInWindow(ctx context.Context, m model, req *Request, key *cells.Key, sp spec, now int64, carry func(*Service, *cells.Window, int64)) (Response, bool, error) {
	w, behind, resp, err := s.windowFor(key, req, sp, now)
	if err != nil {
		return resp, true, err
	}
	if behind {
		// Decide now, in the cell the janitor left (the key does not
		// depend on the clock: w is the window to decide in).
		now = s.clock.Now().UnixMilli()
	}
	b := m.prepare(ctx, s, w, sp, now)
	s.regional.prepare(ctx, w, now)
	if carry != nil {
		carry(s, w, now)
	}
	d, cur, counted := m.count(s, w, b, now, sp, req.Cost, req.Report, false)
	if counted && w.Evicted() {
		// The janitor is removing w: take the count back and decide
		// again on the window that replaces it.
		m.takeBack(s, w, cur, sp, req.Cost)
		cur.Count.Add(-req.Cost)
		runtime.Gosched()
		return Response{}, false, nil
	}
	if counted && req.Reserve {
		// Decisions on the cell weigh its refunds from now on, and
		// reads of the regional store fetch them.
		cur.Flags.Or(cells.Reserved)
	}
	s.regional.afterDecide(w, cur, now, &d, countedCost(counted, req.Cost))
	if counted {
		s.global.noteGrowth(w, cur, req.Limit)
	}
	return d.response(), true, nil
}

// currentCells returns w's cell of now (unix ms), made if need be, and
// the one before (nil if it saw no traffic), with the cell's bounds and
// the clock reading to decide at: when another request already moved w
// past now (its clock reading is older than another's), the start of w's
// current cell, the strictest moment of that cell.
func (s *Service) currentCells(w *cells.Window, now int64) (cur, prev *cells.Cell, start, end, at int64) {
	hydrated := s.regional == nil
	seq, start, end := w.SeqAt(now)
	cur, prev, newer := w.CellsAt(seq, hydrated)
	for cur == nil {
		now = w.StartOf(newer)
		seq, start, end = w.SeqAt(now)
		cur, prev, newer = w.CellsAt(seq, hydrated)
	}
	return cur, prev, start, end, now
}

// countWindow evaluates a request of cost against sp in window w at now
// (unix ms) and, on success with cost > 0, counts cost into the current
// cell: the count of the sliding window, and with fixed set of the fixed
// window, which weighs the current cell alone. A report (see
// Request.Report) counts cost whatever the verdict, and is judged with it
// counted. With speculative set the increment is also recorded as
// uncommitted, for a batch that may still roll back (never a report). It
// returns the current cell and whether it counted cost into it.
func (s *Service) countWindow(w *cells.Window, now int64, sp spec, cost int64, report, speculative, fixed bool) (decision, *cells.Cell, bool) {
	cur, prev, start, end, now := s.currentCells(w, now)
	if fixed {
		// Only the current window counts.
		prev = nil
	}
	seq := cur.Seq()
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
		curRefunds, prevRefunds := s.refundsAt(w, seq)
		curGlobal -= curRefunds
		if prev != nil {
			prevGlobal -= prevRefunds
		}
	}
	d := decision{algorithm: sp.algorithm, limit: sp.limit, capacity: sp.limit, resetMs: end}
	limit := sp.limit
	if report && cost > 0 {
		// Spent already: counted whatever the verdict, up to maxCount, so
		// that reports without end never wrap the counter.
		n := addCapped(&cur.Count, cost)
		prevTotal := prevGlobal
		if prev != nil {
			prevTotal += prev.Count.Load()
		}
		prevTotal = max(prevTotal, 0)
		curTotal := max(n+curGlobal, 0)
		effective := curTotal + weighted(prevTotal, elapsed, dur)
		d.success = effective <= limit
		d.remaining = min(max(0, limit-effective), limit)
		if !d.success {
			// When a check (cost 0) would pass again.
			d.retryAfter = windowRetry(fixed, sp.limit, elapsed, dur, curTotal, prevTotal, 0)
		}
		return d, cur, true
	}
	// Count by compare-and-swap; after cells.FastCASAttempts lost races, or on
	// a cell another decision holds the lock of, under the key's lock
	// (see cells.Contention): never refused for losing races.
	var held *sync.Mutex
	if curFlags&cells.Contended != 0 {
		held = s.contention.Lock(cur)
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
		if cost > limit || effective > limit {
			d.success = false // a race lost may have found room before
			d.remaining = min(max(0, limit-(effective-cost)), limit)
			d.retryAfter = windowRetry(fixed, sp.limit, elapsed, dur, curTotal, prevTotal, cost)
			cells.Unlock(held, cur)
			return d, cur, false
		}
		d.success = true
		d.remaining = min(limit-effective, limit)
		if cost == 0 {
			cells.Unlock(held, cur)
			return d, cur, false
		}
		if s.beforeCAS != nil {
			s.beforeCAS(w, cur, attempt)
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
		held = s.contention.AfterLost(held, cur, attempt)
	}
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

// countedCost is cost if it was counted, else 0.
func countedCost(counted bool, cost int64) int64 {
	if counted {
		return cost
	}
	return 0
}

// maxCount is the most reports take a cell's count to: 2^56, far past any
// limit (at most 2^53), and low enough that the sum of a hundred regions'
// counts still fits an int64. Reports are counted past the limit and
// would otherwise overflow a counter with enough of them; nothing else
// counts past the limit.
const maxCount = 1 << 56

// addCapped adds cost (at most MaxCost) to c, stopping at maxCount, and
// returns the new count.
func addCapped(c *atomic.Int64, cost int64) int64 {
	for {
		old := c.Load()
		n := min(old+cost, max(old, maxCount))
		if n == old || c.CompareAndSwap(old, n) {
			return n
		}
	}
}

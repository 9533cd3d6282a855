package ratelimit

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
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
	var d decision
	for attempt := range maxEvictionRetries {
		if attempt > 0 {
			// The janitor removed the window as idle at its own clock
			// reading, which may be past ours: the cells of our reading
			// went with it. Decide again now, in the window's current
			// cell, which the new window reads back, rather than in an
			// old one it starts from zero.
			now = s.clock.Now().UnixMilli()
		}
		if sp.algorithm == Concurrency {
			key = poolKey(&req, now)
		}
		w, err := s.windows.ForRequest(&key)
		if err != nil {
			return Response{Limit: req.Limit, Reset: resetAt(&req, now), Algorithm: sp.algorithm}, err
		}
		if now < s.windows.JanitorNow.Load() {
			// The janitor read a later clock than ours and may have
			// removed, as idle, the window whose cells our reading falls
			// in: w may be one made since, empty for them. Decide now.
			now = s.clock.Now().UnixMilli()
			if sp.algorithm == Concurrency {
				continue // in the cell of now
			}
		}
		w.ObserveLimit(req.Limit)
		if sp.algorithm == Concurrency {
			if resp, ok := s.decideSlots(ctx, w, now, sp, &req); ok {
				return resp, nil
			}
			continue // the janitor removed w meanwhile
		}
		var b *bucket
		if sp.algorithm == TokenBucket {
			// Before the regional store's read, which takes what it
			// raises from the bucket.
			b = s.bucketFor(ctx, w, sp, now)
		}
		s.regional.prepare(ctx, w, now)
		if key.Period.Kind() == period.Calendar {
			// What other zones' periods counted of this one.
			s.carryZones(w, now)
		}
		var cur *cells.Cell
		var counted bool
		d, cur, counted = s.decide(w, b, now, sp, req.Cost, req.Report, false)
		if counted && w.Evicted() {
			// The janitor is removing w: take the count back and decide
			// again on the window that replaces it.
			s.windows.takeBack(w, cur, sp, req.Cost)
			runtime.Gosched()
			continue
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
		return d.response(), nil
	}
	// Unreachable in practice: the janitor kept removing the window under
	// this request. Fail closed.
	d.success = false
	return d.response(), nil
}

// decide evaluates a request of cost against sp in window w at now (unix
// ms) and, on success with cost > 0, counts cost into the current cell. A
// report (see Request.Report) counts cost whatever the verdict, and is
// judged with it counted. With speculative set the increment is also
// recorded as uncommitted, for a batch that may still roll back (never a
// report). b is w's bucket for a token bucket (see bucketFor). It
// returns the current cell and whether it counted cost into it.
func (s *Service) decide(w *cells.Window, b *bucket, now int64, sp spec, cost int64, report, speculative bool) (decision, *cells.Cell, bool) {
	hydrated := s.regional == nil
	seq, start, end := w.SeqAt(now)
	cur, prev, newer := w.CellsAt(seq, hydrated)
	for cur == nil {
		// Another request already moved this window past our clock
		// reading: decide at the start of its window, the strictest
		// moment of that window.
		seq, now = newer, w.StartOf(newer)
		seq, start, end = w.SeqAt(now)
		cur, prev, newer = w.CellsAt(seq, hydrated)
	}
	if sp.algorithm == TokenBucket {
		return s.decideBucket(w, b, now, sp, cur, cost, report, speculative)
	}
	if sp.algorithm == FixedWindow {
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
		effective := curTotal + sp.overlap(prevTotal, elapsed, dur)
		d.success = effective <= limit
		d.remaining = min(max(0, limit-effective), limit)
		if !d.success {
			// When a check (cost 0) would pass again.
			d.retryAfter = sp.retryAfter(elapsed, dur, curTotal, prevTotal, 0)
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
		effective := curTotal + sp.overlap(prevTotal, elapsed, dur) + cost
		if cost > limit || effective > limit {
			d.success = false // a race lost may have found room before
			d.remaining = min(max(0, limit-(effective-cost)), limit)
			d.retryAfter = sp.retryAfter(elapsed, dur, curTotal, prevTotal, cost)
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

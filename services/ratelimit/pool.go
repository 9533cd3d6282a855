package ratelimit

import (
	"context"
	"runtime"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/pool"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// A concurrency limit is one pool of slots per identity, each slot counted
// in the cell of its expiry: see internal/pool, which keeps the pools.

// acquireSlots is Service.Decide for req, an acquisition (or, at cost 0,
// a check) of a concurrency limit, which is no model (see model): in the
// window of the cell a slot taken now is counted in, found again at each
// attempt because that cell moves with the clock, from the whole pool,
// and through the regional store's atomic take where there is one (see
// decideSlots).
func (s *Service) acquireSlots(ctx context.Context, req *Request, sp spec) (Response, error) {
	now := s.clock.Now().UnixMilli()
	for attempt := range maxEvictionRetries {
		if attempt > 0 {
			// The janitor removed the window, or read a later clock
			// than ours: decide again now, in the cell of now.
			now = s.clock.Now().UnixMilli()
		}
		key := poolKey(req, now)
		w, err := s.windows.ForRequest(&key)
		if err != nil {
			return Response{Limit: req.Limit, Reset: resetAt(req, now), Algorithm: sp.algorithm}, err
		}
		if now < s.windows.JanitorNow.Load() {
			continue // the janitor may have removed the cell of now
		}
		w.ObserveLimit(req.Limit)
		if resp, ok := s.decideSlots(ctx, w, now, sp, req); ok {
			return resp, nil
		}
	}
	// Unreachable in practice: the janitor kept removing the window under
	// this request. Fail closed.
	return Response{Limit: req.Limit, Reset: resetAt(req, now), Algorithm: sp.algorithm}, nil
}

// poolOf returns the pool of w, a pool cell's window, filing w first if
// another request made it and has not filed it yet (filing is idempotent);
// nil if the janitor is removing w.
func (t *windowTable) poolOf(w *cells.Window) *pool.Group {
	if g := t.pools.Of(w); g != nil || w.Evicted() {
		return g
	}
	t.Filed(w)
	return t.pools.Of(w)
}

// poolKey returns the key of the cell a slot of the concurrency limit of
// req (its lease in Duration) acquired at now (unix ms) is counted in.
func poolKey(req *Request, now int64) cells.Key {
	return cells.Key{Workspace: req.Workspace, Namespace: req.Namespace, Identifier: req.Identifier,
		Period: period.ForLease(req.Duration.Milliseconds(), now)}
}

// checkPoolOf answers a check (cost 0) of the concurrency limit of req at
// now (unix ms) from what this process knows, through w, a window of the
// pool (a held slot's cell), the regional store not read: after a release
// that read the pool with it. The answer's Reset is the end of the cell a
// slot taken now would be counted in, as a check answers. It reports
// false when it could not (the janitor removed w).
func (s *Service) checkPoolOf(w *cells.Window, req *Request, now int64) (Response, bool) {
	d, cur, _ := s.decidePool(w, now, specOf(req), 0)
	if cur == nil {
		return Response{}, false
	}
	d.resetMs = period.ForLease(req.Duration.Milliseconds(), now).CellEnd()
	return d.response(), true
}

// decidePool decides an acquisition of cost slots (0: a check of what is
// held) of sp's pool, counted into w's cell, from what this process knows
// at now (unix ms), and counts it if it fits. It returns w's cell and
// whether it counted cost into it; nil, when the janitor removed w
// meanwhile.
func (s *Service) decidePool(w *cells.Window, now int64, sp spec, cost int64) (decision, *cells.Cell, bool) {
	seq, end := pool.CellOf(w)
	cur, _ := w.CellAt(seq, s.regional == nil)
	g := s.windows.poolOf(w)
	if cur == nil || g == nil {
		return decision{}, nil, false
	}
	g.Lock()
	defer g.Unlock()
	held := g.Held(now, nil)
	d := decision{algorithm: Concurrency, limit: sp.limit, capacity: sp.limit, resetMs: end}
	if cost > sp.limit || held > sp.limit-cost {
		var cells []pool.Held
		g.Held(now, &cells)
		d.remaining = min(max(sp.limit-held, 0), sp.limit)
		d.retryAfter = pool.FreeAfter(cells, held, cost, sp.limit, now)
		return d, cur, false
	}
	d.success = true
	d.remaining = sp.limit - held - cost
	if cost == 0 {
		return d, cur, false
	}
	addCapped(&cur.Count, cost)
	return d, cur, true
}

// LeaseCell returns the cell that the slots of a lease of lease, which an
// acquisition or extension answered with resp, are counted in: the one
// that ends at resp.Reset.
func LeaseCell(resp Response, lease time.Duration) int64 {
	return store.PoolCellOf(store.PoolShift(lease.Milliseconds()), resp.Reset.UnixMilli())
}

// LeaseEnd returns when the slots of a lease of lease counted in cell
// free themselves if they are not released: the cell's end.
func LeaseEnd(lease time.Duration, cell int64) time.Time {
	return time.UnixMilli(period.OfLease(lease.Milliseconds(), cell).CellEnd())
}

// decideSlots decides req, an acquisition (or, at cost 0, a check) of
// slots of the pool of w, w's cell the one its slots are counted in, at
// now (unix ms). It reports false when the janitor removed w meanwhile:
// the caller decides again.
func (s *Service) decideSlots(ctx context.Context, w *cells.Window, now int64, sp spec, req *Request) (Response, bool) {
	lost := false
	if s.regional != nil && req.Cost > 0 {
		// Slots are taken in the regional store, atomically; from
		// memory only when it fails.
		d, cur, outcome := s.regional.takeSlots(ctx, w, now, sp, req.Cost)
		if outcome == takeAnswered {
			if d.success {
				s.global.NoteGrowth(w, cur, req.Limit)
			}
			s.regional.afterDecide(w, cur, now, &d, 0)
			return d.response(), true
		}
		// The store took no slots, or failed: decide from memory, as a
		// strict key does, after a read of what the region holds (the
		// store's reads may answer where its writes did not). What the
		// others took since their last replay is all this process
		// cannot know.
		s.regional.makeStrict(w, now)
		lost = outcome == takeLost
	}
	if s.regional != nil {
		// A check, or a take the store did not answer: what the region
		// holds, read in the store first, every cell of the pool.
		s.regional.readPool(ctx, w, now)
	}
	s.regional.prepare(ctx, w, now)
	d, cur, counted := s.decidePool(w, now, sp, req.Cost)
	if cur == nil {
		runtime.Gosched() // the janitor is removing w: let it
		return Response{}, false
	}
	switch {
	case lost:
		// The take's answer was lost: the store may hold its slots,
		// and a replay writes the take's total so that it does, once
		// (see lostTake). Counted here whatever the decision: denied,
		// they are held by no one until their cell ends, counted once,
		// never twice, and never freed where no one took them.
		if !counted {
			addCapped(&cur.Count, req.Cost)
		}
		s.regional.afterDecide(w, cur, now, &d, 0)
		s.global.NoteGrowth(w, cur, req.Limit)
		return d.response(), true
	case counted && w.Evicted():
		// The janitor is removing w: take the count back and decide
		// again on the window that replaces it.
		cur.Count.Add(-req.Cost)
		runtime.Gosched()
		return Response{}, false
	}
	s.regional.afterDecide(w, cur, now, &d, countedCost(counted, req.Cost))
	if counted {
		s.global.NoteGrowth(w, cur, req.Limit)
	}
	return d.response(), true
}

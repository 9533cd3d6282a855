package ratelimit

import (
	"context"
	"runtime"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/model"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/pool"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/regional"
)

// A concurrency limit is one pool of slots per identity, each slot counted
// in the cell of its expiry: see internal/pool, which keeps the pools.

// acquireSlots is Service.Decide for req, an acquisition (or, at cost 0,
// a check) of a concurrency limit, which is no model (see model): in the
// window of the cell a slot taken now is counted in, found again at each
// attempt because that cell moves with the clock, from the whole pool,
// and through the regional store's atomic take where there is one (see
// decideSlots).
func (s *Service) acquireSlots(ctx context.Context, req *Request, sp model.Spec) (Response, error) {
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
			return Response{Limit: req.Limit, Reset: resetAt(req, now), Algorithm: Concurrency}, err
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
	return Response{Limit: req.Limit, Reset: resetAt(req, now), Algorithm: Concurrency}, nil
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
	d, cur, _ := s.windows.DecidePool(w, now, specOf(req), 0)
	if cur == nil {
		return Response{}, false
	}
	d.ResetMs = period.ForLease(req.Duration.Milliseconds(), now).CellEnd()
	return response(&d, Concurrency), true
}

// decideSlots decides req, an acquisition (or, at cost 0, a check) of
// slots of the pool of w, w's cell the one its slots are counted in, at
// now (unix ms). It reports false when the janitor removed w meanwhile:
// the caller decides again.
func (s *Service) decideSlots(ctx context.Context, w *cells.Window, now int64, sp model.Spec, req *Request) (Response, bool) {
	lost := false
	if s.regional != nil && req.Cost > 0 {
		// Slots are taken in the regional store, atomically; from
		// memory only when it fails.
		t, cur, outcome := s.regional.TakeSlots(ctx, w, now, sp.Limit, req.Cost)
		if outcome == regional.TakeAnswered {
			_, end := pool.CellOf(w)
			d := model.Decision{Limit: sp.Limit, Capacity: sp.Limit, ResetMs: end,
				Success: t.OK, Remaining: min(max(sp.Limit-t.Held, 0), sp.Limit), RetryAfter: t.RetryAfter}
			if d.Success {
				s.global.NoteGrowth(w, cur, req.Limit)
			}
			s.afterDecide(w, cur, now, &d, 0)
			return response(&d, Concurrency), true
		}
		// The store took no slots, or failed: decide from memory, as a
		// strict key does, after a read of what the region holds (the
		// store's reads may answer where its writes did not; a lost
		// take has read it). What the others took since their last
		// replay is all this process cannot know.
		s.regional.MakeStrict(w, now)
		lost = outcome == regional.TakeLost
	}
	if s.regional != nil && !lost {
		// A check, or a take not sent: what the region holds, read in
		// the store first, every cell of the pool (a lost take read it).
		s.regional.ReadPool(ctx, w, now)
	}
	s.regional.Prepare(ctx, w, now)
	d, cur, counted := s.windows.DecidePool(w, now, sp, req.Cost)
	if cur == nil {
		runtime.Gosched() // the janitor is removing w: let it
		return Response{}, false
	}
	switch {
	case lost:
		// The take's answer was lost: the store may hold its slots,
		// and a replay writes the take's total so that it does, once
		// (see the regional tier's lostTake). Counted here whatever the decision: denied,
		// they are held by no one until their cell ends, counted once,
		// never twice, and never freed where no one took them.
		if !counted {
			cells.AddCapped(&cur.Count, req.Cost)
		}
		s.afterDecide(w, cur, now, &d, 0)
		s.global.NoteGrowth(w, cur, req.Limit)
		return response(&d, Concurrency), true
	case counted && w.Evicted():
		// The janitor is removing w: take the count back and decide
		// again on the window that replaces it.
		cur.Count.Add(-req.Cost)
		runtime.Gosched()
		return Response{}, false
	}
	s.afterDecide(w, cur, now, &d, countedCost(counted, req.Cost))
	if counted {
		s.global.NoteGrowth(w, cur, req.Limit)
	}
	return response(&d, Concurrency), true
}

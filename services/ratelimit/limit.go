package ratelimit

import (
	"context"
	"runtime"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/model"
)

// Limit decides whether req may spend its cost and, on success with a cost
// above zero, counts it. It returns a [*invalid.Error] for a request that
// breaks a rule, and a [*CapacityError] for a new key in a workspace that holds
// the most windows allowed, and counts nothing then. A warm decision does not
// allocate and, unless the key is strict or its copy of the region's counts is
// older than a second (see [store.Regional]), does not wait on the network.
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
	alg := req.Model()
	sp := specOf(&req)
	if alg == Concurrency {
		// The one model whose window's key moves with the clock (a
		// slot's cell): see acquireSlots.
		return s.acquireSlots(ctx, &req, sp)
	}
	key := keyOf(&req)
	m := modelFor(&req)
	now := s.clock.Now().UnixMilli()
	var d model.Decision
	for attempt := range maxEvictionRetries {
		if attempt > 0 {
			// The janitor removed the window as idle at its own clock
			// reading, which may be past ours: the cells of our reading
			// went with it. Decide again now, in the window's current
			// cell, which the new window reads back, rather than in an
			// old one it starts from zero.
			now = s.clock.Now().UnixMilli()
		}
		w, err := s.windows.ForRequest(&key)
		if err != nil {
			return Response{Limit: req.Limit, Reset: resetAt(&req, now), Algorithm: alg}, err
		}
		if now < s.windows.JanitorNow.Load() {
			// The janitor read a later clock than ours and may have
			// removed, as idle, the window whose cells our reading falls
			// in: w may be one made since, empty for them. Decide now.
			now = s.clock.Now().UnixMilli()
		}
		w.ObserveLimit(req.Limit)
		b := m.Prepare(ctx, &s.windows, w, sp, now)
		s.regional.Prepare(ctx, w, now)
		var cur *cells.Cell
		var counted bool
		d, cur, counted = m.Count(&s.windows, w, b, now, sp, req.Cost, req.Report, false)
		if counted && w.Evicted() {
			// The janitor is removing w: take the count back and decide
			// again on the window that replaces it.
			m.TakeBack(&s.windows, w, cur, sp, req.Cost)
			cur.Count.Add(-req.Cost)
			runtime.Gosched()
			continue
		}
		if counted && req.Reserve {
			// Decisions on the cell weigh its refunds from now on, and
			// reads of the regional store fetch them.
			cur.Flags.Or(cells.Reserved)
		}
		s.afterDecide(w, cur, now, &d, countedCost(counted, req.Cost))
		if counted {
			s.global.NoteGrowth(w, cur, req.Limit)
		}
		return response(&d, alg), nil
	}
	// Unreachable in practice: the janitor kept removing the window under
	// this request. Fail closed.
	d.Success = false
	return response(&d, alg), nil
}

package ratelimit

import (
	"context"
	"runtime"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/model"
)

// MultiResponse is the outcome of [Service.MultiLimit].
type MultiResponse struct {
	// Passed reports whether every limit admitted the request; only then was
	// anything counted.
	Passed bool
	// Results holds one response per request, in request order. Success
	// says whether that limit alone admitted the request; when Passed is
	// false nothing was counted and Remaining is what is left without it.
	Results []Response
}

// speculated is one speculative increment of a batch.
type speculated struct {
	w     *cells.Window
	c     *cells.Cell
	cost  int64
	index int
}

// MultiLimit decides all reqs together: either every limit admits the request
// and all are counted, or nothing is counted anywhere. Requests on the same key
// accumulate: the second sees the first's cost. It returns a
// [*invalid.Error] naming the offending entry (such as "limits[2].cost")
// when any request breaks a rule, or a [*CapacityError] when a new key would
// take its workspace past its cap, and counts nothing then.
func (s *Service) MultiLimit(ctx context.Context, reqs []Request) (MultiResponse, error) {
	if err := ValidateBatch(reqs); err != nil {
		return MultiResponse{}, err
	}
	return s.DecideAll(ctx, reqs)
}

// DecideAll is MultiLimit for a batch its caller has validated, with
// ValidateBatch or entry by entry as for [Service.Decide]: it is not checked
// again. An entry whose limit is 0 is blocked: the batch fails, nothing is
// counted, and the other entries report what is left for them.
func (s *Service) DecideAll(ctx context.Context, reqs []Request) (MultiResponse, error) {
	if anyBlocked(reqs) {
		return s.decideBlocked(ctx, reqs)
	}
	keys := make([]cells.Key, len(reqs))
	for i := range reqs {
		keys[i] = keyOf(&reqs[i])
	}
	now := s.clock.Now().UnixMilli()
	results := make([]Response, len(reqs))
	applied := make([]speculated, 0, len(reqs))
	windows := make([]*cells.Window, len(reqs))
	curs := make([]*cells.Cell, len(reqs))
	decisions := make([]model.Decision, len(reqs))
	buckets := make([]*model.Bucket, len(reqs))
	for range maxEvictionRetries {
		for i := range reqs {
			w, err := s.windows.ForRequest(&keys[i])
			if err != nil {
				return MultiResponse{}, err
			}
			windows[i] = w
			w.ObserveLimit(reqs[i].Limit)
			// A bucket before the regional store's read, which takes what
			// it raises from it.
			sp := specOf(&reqs[i])
			buckets[i] = modelFor(&reqs[i]).Prepare(ctx, &s.windows, w, sp, now)
		}
		s.regional.PrepareBatch(ctx, windows, now)
		applied = applied[:0]
		passed := true
		for i, w := range windows {
			sp := specOf(&reqs[i])
			d, c, ok := modelFor(&reqs[i]).Count(&s.windows, w, buckets[i], now, sp, reqs[i].Cost, false, true)
			results[i], curs[i], decisions[i] = response(&d, reqs[i].Model()), c, d
			passed = passed && d.Success
			if ok {
				applied = append(applied, speculated{w: w, c: c, cost: reqs[i].Cost, index: i})
			}
		}
		evicted := false
		for _, a := range applied {
			evicted = evicted || a.w.Evicted()
		}
		if passed && !evicted {
			for _, a := range applied {
				a.w.Commit(a.c, a.cost)
				s.global.NoteGrowth(a.w, a.c, reqs[a.index].Limit)
			}
			for i, w := range windows {
				s.afterDecide(w, curs[i], now, &decisions[i], countedCost(decisions[i].Success && reqs[i].Cost > 0, reqs[i].Cost))
			}
			return MultiResponse{Passed: true, Results: results}, nil
		}
		for i := len(applied) - 1; i >= 0; i-- {
			a := applied[i]
			a.w.Rollback(a.c, a.cost)
			sp := specOf(&reqs[a.index])
			modelFor(&reqs[a.index]).TakeBack(&s.windows, a.w, a.c, sp, a.cost)
		}
		if !evicted {
			// Nothing was counted: each result's remaining is what is left
			// without the batch, so give back every speculative increment
			// it saw, its own and those of earlier entries on its cell.
			for _, a := range applied {
				for i := a.index; i < len(results); i++ {
					switch {
					case curs[i] != a.c:
					case results[i].Algorithm == TokenBucket:
						// A bucket's tokens were taken by the bucket
						// entries before it on its key alone.
						if reqs[a.index].Algorithm == TokenBucket {
							results[i].Remaining += a.cost // tokens held before, at most the burst
						}
					default:
						results[i].Remaining = min(results[i].Limit, results[i].Remaining+a.cost)
					}
				}
			}
			for i, w := range windows {
				s.afterDecide(w, curs[i], now, &decisions[i], 0)
				results[i].Wait = 0 // nothing was booked: the batch failed
			}
			return MultiResponse{Passed: false, Results: results}, nil
		}
		// The janitor is removing a window of this batch: decide again.
		runtime.Gosched()
	}
	for i := range results {
		results[i].Success, results[i].Wait = false, 0
	}
	return MultiResponse{Passed: false, Results: results}, nil
}

// decideBlocked is DecideAll for a batch that a limit of 0 blocks: the
// batch fails and nothing is counted; each entry that is not blocked
// reports what is left for it.
func (s *Service) decideBlocked(ctx context.Context, reqs []Request) (MultiResponse, error) {
	now := s.clock.Now().UnixMilli()
	out := MultiResponse{Results: make([]Response, len(reqs))}
	var peeks []Request
	var at []int
	for i, r := range reqs {
		if r.Limit == 0 {
			out.Results[i] = blocked(&r, now)
			continue
		}
		r.Cost = 0
		peeks = append(peeks, r)
		at = append(at, i)
	}
	if len(peeks) > 0 {
		resp, err := s.DecideAll(ctx, peeks)
		if err != nil {
			return MultiResponse{}, err
		}
		for j, i := range at {
			out.Results[i] = resp.Results[j]
		}
	}
	return out, nil
}

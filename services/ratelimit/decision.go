package ratelimit

import (
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/model"
)

// What every route does with a model's decision: the answer, the
// regional tier's share, and how often it starts again when the janitor
// removed its window.

// maxEvictionRetries bounds how often a decision starts again because the
// janitor was removing its window. The janitor removes a window only when no
// request used it for two windows, so one retry is the norm.
const maxEvictionRetries = 8

// afterDecide does the regional tier's share of d, a decision on w at now
// that counted counted into cur.
func (s *Service) afterDecide(w *cells.Window, cur *cells.Cell, now int64, d *model.Decision, counted int64) {
	s.regional.AfterDecide(w, cur, now, counted, d.Success, d.Remaining, d.Capacity)
}

// response is the answer of d, a decision by alg.
func response(d *model.Decision, alg Algorithm) Response {
	return Response{
		Success:    d.Success,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		Reset:      time.UnixMilli(d.ResetMs),
		RetryAfter: time.Duration(d.RetryAfter) * time.Millisecond,
		Algorithm:  alg,
		Wait:       time.Duration(d.WaitMs) * time.Millisecond,
	}
}

// countedCost is cost if it was counted, else 0.
func countedCost(counted bool, cost int64) int64 {
	if counted {
		return cost
	}
	return 0
}

package ratelimit

import (
	"context"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// A model is how one algorithm decides: the sliding window (sliding.go),
// the fixed window (fixed.go), the calendar window (calendar.go), the
// token bucket (bucket.go) and the concurrency limit (pool.go). specOf
// chooses it once for a request, and a decision then makes one indirect
// call into it (Service.Decide, a batch's entries) where it would
// otherwise ask the algorithm at each of its steps. Every model decides
// from the same cells (package internal/cells), which know no model.
type model interface {
	// decide makes one attempt of Service.Decide at now (unix ms) for
	// req, whose spec is sp and whose window, where the key does not
	// depend on the clock, has key: it finds the window, decides and
	// counts what it admits. It reports not done when the janitor
	// removed the window meanwhile, or read a later clock than now where
	// the window's key depends on the clock: the caller reads the clock
	// and tries again.
	decide(ctx context.Context, s *Service, req *Request, key *cells.Key, sp spec, now int64) (resp Response, done bool, err error)
	// prepare readies w, found for a batch's entry, for a decision at
	// now: it returns w's token bucket (nil for the other models), which
	// is made before the regional store's read that takes from it.
	prepare(ctx context.Context, s *Service, w *cells.Window, sp spec, now int64) *bucket
	// count decides a request of cost against sp in w at now and, on
	// success with cost above 0, counts it into w's current cell (see
	// countWindow). b is w's bucket (see prepare). A report counts
	// whatever the verdict; speculative records the count as a batch's,
	// which may still roll back.
	count(s *Service, w *cells.Window, b *bucket, now int64, sp spec, cost int64, report, speculative bool) (decision, *cells.Cell, bool)
	// takeBack undoes a count of cost into c, a cell of w: what a model
	// keeps beside the cell too (a bucket's tokens). The count itself is
	// the caller's to take back.
	takeBack(s *Service, w *cells.Window, c *cells.Cell, sp spec, cost int64)
}

// spec is what one decision needs of its request's limit: the model and
// its numbers.
type spec struct {
	model     model
	algorithm Algorithm
	limit     int64
	// burst is a token bucket's capacity (the request's Burst, or limit).
	burst int64
	// durationMs is the request's duration: a token bucket refills limit
	// per durationMs (its cells may be longer: see cellShift).
	durationMs int64
}

// specOf returns req's spec, its model chosen here once: a request that
// names a calendar counts its periods as a fixed window does. A model is
// a value of no size: choosing one allocates nothing.
func specOf(req *Request) spec {
	s := spec{algorithm: req.Algorithm, limit: req.Limit, burst: req.Burst, durationMs: req.Duration.Milliseconds()}
	switch {
	case !req.Calendar.IsZero():
		s.algorithm, s.model = FixedWindow, calendarWindow{}
	case req.Algorithm == FixedWindow:
		s.model = fixedWindow{}
	case req.Algorithm == TokenBucket:
		s.model = tokenBucket{}
	case req.Algorithm == Concurrency:
		s.model = concurrencyLimit{}
	default:
		s.model = slidingWindow{}
	}
	if s.burst == 0 {
		s.burst = s.limit
	}
	return s
}

// keyOf returns the key of req's window: its cells are a calendar's
// periods, a token bucket's cells of a power of two of ms long enough to
// hold its memory (see cellShift), or windows of req's duration. A
// concurrency limit's cell depends on the clock too: see poolKey.
func keyOf(req *Request) cells.Key {
	k := cells.Key{Workspace: req.Workspace, Namespace: req.Namespace, Identifier: req.Identifier}
	switch {
	case !req.Calendar.IsZero():
		k.Period = period.OfCalendar(req.Calendar)
	case req.Algorithm == TokenBucket && req.Limit > 0:
		k.Period = period.BucketCells(cellShift(req.Limit, req.Duration.Milliseconds(), specOf(req).burst))
	default:
		k.Period = period.OfLength(req.Duration.Milliseconds())
	}
	return k
}

// plainCells is what the models whose state is their cells alone (the
// windows) share: nothing beside a cell to make or take back.
type plainCells struct{}

func (plainCells) prepare(context.Context, *Service, *cells.Window, spec, int64) *bucket {
	return nil
}

func (plainCells) takeBack(*Service, *cells.Window, *cells.Cell, spec, int64) {}

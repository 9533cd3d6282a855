package ratelimit

import (
	"context"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// A model is how one algorithm decides in a window whose key is fixed:
// the windows (window.go: the sliding window, and the fixed and calendar
// windows, which weigh the current cell alone) and the token bucket
// (bucket.go). modelFor chooses it once for a request, and a decision
// then calls into it (Service.Decide, a batch's entries) where it would
// otherwise ask the algorithm at each of its steps. Every model decides
// from the same cells (package internal/cells), which know no model. A
// concurrency limit is no model: its window is the cell a slot taken now
// is counted in, which moves with the clock, and it decides from the
// whole pool, so Decide sends it its own way (Service.acquireSlots,
// pool.go); a batch never holds one (checkModel refuses it).
// No method takes a pointer to its caller's stack: passed through an
// interface it would escape, and a decision would allocate. The model is
// kept apart from the spec rather than in it: a spec of four words is
// passed in registers, one of six spills to the stack at every call
// (measured: warm decisions a few per cent slower).
type model interface {
	// prepare readies w for a decision at now (unix ms) by sp before the
	// regional store's read: it returns w's token bucket, made before
	// the read that takes from it, or nil for the other models.
	prepare(ctx context.Context, s *Service, w *cells.Window, sp spec, now int64) *bucket
	// count decides a request of cost against sp in w at now, the
	// regional store read, and on success with cost above 0 counts it
	// into w's current cell. b is w's bucket (see prepare). A report
	// (see Request.Report) counts whatever the verdict, and is judged
	// with it counted; speculative records the count as a batch's, which
	// may still roll back (never a report). It returns w's current cell
	// and whether it counted cost into it.
	count(s *Service, w *cells.Window, b *bucket, now int64, sp spec, cost int64, report, speculative bool) (decision, *cells.Cell, bool)
	// takeBack undoes a count of cost into c, a cell of w: what a model
	// keeps beside the cell too (a bucket's tokens). The count itself is
	// the caller's to take back.
	takeBack(s *Service, w *cells.Window, c *cells.Cell, sp spec, cost int64)
}

// spec is what one decision needs of its request's limit: its numbers.
type spec struct {
	algorithm Algorithm
	limit     int64
	// burst is a token bucket's capacity (the request's Burst, or limit).
	burst int64
	// durationMs is the request's duration: a token bucket refills limit
	// per durationMs (its cells may be longer: see cellShift).
	durationMs int64
}

// specOf returns req's spec: a request that names a calendar counts its
// periods as a fixed window does.
func specOf(req *Request) spec {
	s := spec{algorithm: req.Algorithm, limit: req.Limit, burst: burstOf(req), durationMs: req.Duration.Milliseconds()}
	if !req.Calendar.IsZero() {
		s.algorithm = FixedWindow
	}
	return s
}

// modelFor returns req's model, chosen here once: a request that names a
// calendar has the calendar window's, an algorithm without one (a
// concurrency limit, which Decide sends elsewhere) the sliding window's. A model is a pointer made into an
// interface once (see modelOf): choosing one allocates nothing.
func modelFor(req *Request) model {
	switch {
	case !req.Calendar.IsZero():
		return calendarModel
	case int(req.Algorithm) < len(modelOf):
		return modelOf[req.Algorithm]
	}
	return modelOf[SlidingWindow]
}

// modelOf holds each algorithm's model, and calendarModel the model of a
// request that names a calendar; modelFor takes one from them. Made into
// interface values once, here: a model chosen costs a load. Each is a
// pointer, its methods' receiver: a call through the interface to a
// method of a value goes through a wrapper that copies every argument
// once more.
var (
	modelOf = [...]model{
		SlidingWindow: &windowModel{},
		FixedWindow:   &windowModel{fixed: true},
		TokenBucket:   &tokenBucket{},
	}
	calendarModel model = &windowModel{fixed: true, zones: true}
)

// burstOf returns req's burst: a token bucket's capacity, its limit
// unless it says otherwise.
func burstOf(req *Request) int64 {
	if req.Burst == 0 {
		return req.Limit
	}
	return req.Burst
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
		k.Period = period.BucketCells(cellShift(req.Limit, req.Duration.Milliseconds(), burstOf(req)))
	default:
		k.Period = period.OfLength(req.Duration.Milliseconds())
	}
	return k
}

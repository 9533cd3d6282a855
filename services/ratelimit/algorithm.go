package ratelimit

import (
	"fmt"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// Algorithm is how a limit counts what it admits. Every model keeps the
// same state in the stores, the admitted cost of each fixed period of the
// key (its cells), so that every one of them is shared across the
// processes of a region and across regions by the same grow-only counts.
type Algorithm uint8

// The models.
const (
	// SlidingWindow weighs the previous fixed window by how much of it the
	// sliding window still overlaps (see the package's documentation):
	// at most limit in any window of duration, approximately.
	SlidingWindow Algorithm = iota
	// FixedWindow counts each fixed window of duration (or each calendar
	// period, with [Request.Calendar]) from zero: at most limit in each,
	// reset at its end. It counts as envoyproxy/ratelimit and limitador do.
	FixedWindow
	// TokenBucket is a bucket of [Request.Burst] tokens refilled at limit
	// per duration, decided as the generic cell rate algorithm (GCRA)
	// does: a request of cost takes cost tokens if the bucket holds them.
	// For every interval [s, t] it admits at most burst + rate·(t−s).
	TokenBucket
	// Concurrency counts slots in flight: at most limit held at once (see
	// [Service.Acquire]), in one pool per identity whatever each holder's
	// lease ([Request.Duration]). A slot is held until it is released or
	// its lease ends (less than a second, or a tenth of the lease, later).
	Concurrency
)

// String names the model as the API does.
func (a Algorithm) String() string {
	switch a {
	case SlidingWindow:
		return "sliding_window"
	case FixedWindow:
		return "fixed_window"
	case TokenBucket:
		return "token_bucket"
	case Concurrency:
		return "concurrency"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// spec is what one decision needs of its request's limit: the model and
// its numbers.
type spec struct {
	algorithm Algorithm
	limit     int64
	// burst is a token bucket's capacity (the request's Burst, or limit).
	burst int64
	// durationMs is the request's duration: a token bucket refills limit
	// per durationMs (its cells may be longer: see cellMs).
	durationMs int64
}

// specOf returns req's spec.
func specOf(req *Request) spec {
	s := spec{algorithm: req.Algorithm, limit: req.Limit, burst: req.Burst, durationMs: req.Duration.Milliseconds()}
	if !req.Calendar.IsZero() {
		s.algorithm = FixedWindow
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

// retryAfter returns how many ms after now a request of cost would pass in
// a window model if no other traffic arrived (see the package function):
// for a fixed window, its end, since the next one starts from zero.
func (sp spec) retryAfter(elapsed, dur, cur, prev, cost int64) int64 {
	switch {
	case cost > sp.limit && sp.algorithm != SlidingWindow:
		return 0
	case sp.algorithm == FixedWindow:
		return dur - elapsed
	}
	return retryAfter(elapsed, dur, cur, prev, sp.limit, cost)
}

// overlap returns how much of the previous cell's count, prev, a decision
// elapsed ms into a cell of dur ms weighs: the share the sliding window
// still overlaps.
func (sp spec) overlap(prev, elapsed, dur int64) int64 {
	return weighted(prev, elapsed, dur)
}

package ratelimit

import (
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/model"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// A request is decided by a model (package internal/model), chosen once
// for it by modelFor: a call into it replaces asking the algorithm at
// each step of a decision. A concurrency limit is no model: its window is
// the cell a slot taken now is counted in, which moves with the clock,
// and it decides from the whole pool, so Decide sends it its own way
// (Service.acquireSlots, pool.go); a batch never holds one (checkModel
// refuses it).

// specOf returns req's spec: the numbers a model decides it by.
func specOf(req *Request) model.Spec {
	return model.Spec{Limit: req.Limit, Burst: burstOf(req), DurationMs: req.Duration.Milliseconds(), MaxWaitMs: req.MaxWait.Milliseconds()}
}

// Model returns the algorithm r is answered as (Response.Algorithm): its
// own, or a fixed window for a request that names a calendar, whose
// periods it counts as a fixed window does.
func (r *Request) Model() Algorithm {
	if !r.Calendar.IsZero() {
		return FixedWindow
	}
	return r.Algorithm
}

// modelFor returns req's model, chosen here once: a request that names a
// calendar has the calendar window's, an algorithm without one (a
// concurrency limit, which Decide sends elsewhere) the sliding window's.
// Choosing one allocates nothing: the models are interface values made
// once (see modelOf).
func modelFor(req *Request) model.Model {
	switch {
	case !req.Calendar.IsZero():
		return model.Calendar
	case int(req.Algorithm) < len(modelOf):
		return modelOf[req.Algorithm]
	}
	return model.Sliding
}

// modelOf holds each algorithm's model; modelFor takes one from it.
var modelOf = [...]model.Model{
	SlidingWindow: model.Sliding,
	FixedWindow:   model.Fixed,
	TokenBucket:   model.TokenBucket,
}

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
// hold its memory (see model.BucketShift), or windows of req's duration. A
// concurrency limit's cell depends on the clock too: see poolKey.
func keyOf(req *Request) cells.Key {
	k := cells.Key{Workspace: req.Workspace, Namespace: req.Namespace, Identifier: req.Identifier}
	switch {
	case !req.Calendar.IsZero():
		k.Period = period.OfCalendar(req.Calendar)
	case req.Algorithm == TokenBucket && req.Limit > 0:
		k.Period = period.BucketCells(model.BucketShift(req.Limit, req.Duration.Milliseconds(), burstOf(req)))
	default:
		k.Period = period.OfLength(req.Duration.Milliseconds())
	}
	return k
}

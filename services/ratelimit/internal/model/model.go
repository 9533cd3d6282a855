// Package model holds the limiter's models, each one file: the windows
// (window.go: sliding, fixed and calendar, one count; sliding.go, the
// sliding weight; zones.go, a calendar's time zones), the token bucket
// (bucket.go, buckets.go) and the concurrency limit's decision on its
// pool (pool.go); and the Table they decide in: the cell table with what
// the models keep beside its windows, and the tiers they tell what they
// counted.
//
// A Model is how one algorithm decides in a window whose key is fixed.
// The limiter chooses one once for a request, and a decision then calls
// into it where it would otherwise ask the algorithm at each of its
// steps. Every model decides from the same cells (package cells), which
// know no model. A concurrency limit is no Model: its window is the cell
// a slot taken now is counted in, which moves with the clock, and it
// decides from the whole pool (Table.DecidePool).
package model

import (
	"context"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
)

// Model decides requests in a window. No method takes a pointer to its
// caller's stack: passed through an interface it would escape, and a
// decision would allocate. The model is kept apart from the Spec rather
// than in it: a spec of a few words is passed in registers, one of six
// spills to the stack at every call (measured: warm decisions a few per
// cent slower).
type Model interface {
	// Prepare readies w for a decision at now (unix ms) by sp before the
	// regional store's read: it returns w's token bucket, made before
	// the read that takes from it, or nil for the other models.
	Prepare(ctx context.Context, t *Table, w *cells.Window, sp Spec, now int64) *Bucket
	// Count decides a request of cost against sp in w at now, the
	// regional store read, and on success with cost above 0 counts it
	// into w's current cell. b is w's bucket (see Prepare). A report
	// counts whatever the verdict, and is judged with it counted;
	// speculative records the count as a batch's, which may still roll
	// back (never a report). It returns w's current cell and whether it
	// counted cost into it.
	Count(t *Table, w *cells.Window, b *Bucket, now int64, sp Spec, cost int64, report, speculative bool) (Decision, *cells.Cell, bool)
	// TakeBack undoes a count of cost into c, a cell of w: what a model
	// keeps beside the cell too (a bucket's tokens). The count itself is
	// the caller's to take back.
	TakeBack(t *Table, w *cells.Window, c *cells.Cell, sp Spec, cost int64)
}

// The models, made into interface values once: a model chosen costs a
// load. Each is a pointer, its methods' receiver: a call through the
// interface to a method of a value goes through a wrapper that copies
// every argument once more.
var (
	// Sliding is the sliding window's model.
	Sliding Model = &windowModel{}
	// Fixed is the fixed window's model.
	Fixed Model = &windowModel{fixed: true}
	// Calendar is the model of a fixed window whose cells are a
	// calendar's periods in a time zone.
	Calendar Model = &windowModel{fixed: true, zones: true}
	// TokenBucket is the token bucket's model.
	TokenBucket Model = &tokenBucket{}
)

// Spec is what one decision needs of its request's limit: its numbers.
type Spec struct {
	// Limit is the request's limit: a window's units per duration, a
	// token bucket's refill per DurationMs.
	Limit int64
	// Burst is a token bucket's capacity (the request's burst, or its
	// limit).
	Burst int64
	// DurationMs is the request's duration: a token bucket refills Limit
	// per DurationMs (its cells may be longer: see BucketShift).
	DurationMs int64
	// MaxWaitMs is how long a request may wait for capacity its model
	// books now (0: none; see ratelimit.Request.MaxWait).
	MaxWaitMs int64
}

// Decision is the outcome of evaluating one request against one window.
type Decision struct {
	// Success reports whether the request was admitted; Limit is its
	// limit.
	Success bool
	Limit   int64
	// Capacity is the most Remaining can be: a window's limit, a token
	// bucket's burst.
	Capacity int64
	// Remaining is what is left after the decision.
	Remaining int64
	// ResetMs is when the window resets (unix ms); RetryAfter how many ms
	// until a request of the same cost may pass after a denial (a refused
	// report's too, counted as it was), 0 when no wait helps.
	ResetMs    int64
	RetryAfter int64
	// WaitMs is, for a request booked ahead (admitted and counted), how
	// many ms after now it may proceed; 0 for one admitted now.
	WaitMs int64
}

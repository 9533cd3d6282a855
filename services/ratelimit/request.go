package ratelimit

import (
	"math"
	"math/bits"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
)

// Request asks whether Identifier may spend Cost units of Limit per Duration
// in Namespace. Workspace partitions every counter: requests of two
// workspaces never see each other's counts.
type Request struct {
	Workspace  string
	Namespace  string
	Identifier string
	// Limit is the number of units allowed per Duration, 1 to [MaxLimit].
	Limit int64
	// Duration is the length of the window (of the refill of Limit, for a
	// token bucket), from [MinDuration] to [MaxDuration]. It is used in
	// whole milliseconds. It is zero with a Calendar.
	Duration time.Duration
	// Algorithm is how the limit counts: a sliding window (the zero
	// value), a fixed window or a token bucket.
	Algorithm Algorithm
	// Burst is a token bucket's capacity, 1 to [MaxLimit]; 0 means Limit.
	// Other models have none.
	Burst int64
	// Calendar, when not zero, makes the limit a fixed window whose
	// windows are the calendar's periods (days, weeks, months or years on
	// a time zone's clock) instead of Duration: Limit a period, reset at
	// the next period's start. Algorithm is then a fixed window.
	Calendar calendar.Period
	// Cost is what this request spends, 0 to [MaxCost]. Cost 0 never counts:
	// it asks whether one more request would still fit.
	Cost int64
	// Report makes the request a usage report: Cost was spent already (the
	// tokens an LLM call used, known when it ended), so it is counted
	// whatever the verdict, and Success answers whether the window is still
	// within its limit with it: false once the budget is spent. Without
	// Report a denied request counts nothing. A batch decided together
	// (MultiLimit) holds no reports.
	Report bool
	// Reserve makes the request a reservation: Cost is an estimate, counted
	// all or nothing like any request, of which the caller will give back
	// what it did not spend (see [Service.GiveBack]). Decisions on a cell a
	// reservation was counted into weigh that cell's refunds. A
	// reservation is never a report, and a batch decided together holds
	// none.
	Reserve bool
}

// Response is the decision for one [Request].
type Response struct {
	// Success reports whether the request was admitted (and, for a single
	// request or a committed batch, counted).
	Success bool
	// Limit repeats the request's limit.
	Limit int64
	// Remaining is how many units are left in the window after this
	// decision: limit - effective on success, limit - (effective - cost) on
	// denial, never below zero. For a token bucket it is the tokens the
	// bucket holds, at most its burst.
	Remaining int64
	// Reset is the end of the current fixed window (or calendar period);
	// for a token bucket, when it will be full again if nothing else is
	// taken.
	Reset time.Time
	// RetryAfter is how long until a request of the same cost would pass if
	// no other traffic arrived. It is zero on success and when no wait can
	// help (cost above the limit, or above a bucket's burst).
	RetryAfter time.Duration
	// Algorithm is the model that decided: the request's, and a fixed
	// window for a calendar.
	Algorithm Algorithm
}

// Window returns the length of the window a decision of r with reset
// applied: Duration, or the calendar period that ends at reset.
func (r *Request) Window(reset time.Time) time.Duration {
	if r.Calendar.IsZero() {
		return r.Duration
	}
	_, start, end := r.Calendar.At(reset.UnixMilli() - 1)
	return time.Duration(end-start) * time.Millisecond
}

// Policy returns what the IETF's RateLimit-Policy field says of r's limit
// for an answer that resets at reset: its quota and the window it is the
// quota of. A window's quota is its limit in its window (a calendar's, the
// period holding reset). A token bucket's is its burst, in the time the
// whole burst takes to refill: the draft has no field of its own for a
// burst, and this way what RateLimit says remains (up to the burst) is a
// share of the quota, as the draft has it, and its reset, when the bucket
// is full again, at most the window. 10 a second with bursts of 100:
// q=100, w=10.
func (r *Request) Policy(reset time.Time) (quota int64, window time.Duration) {
	if r.Algorithm != TokenBucket || r.Limit <= 0 {
		return r.Limit, r.Window(reset)
	}
	burst := r.Burst
	if burst == 0 {
		burst = r.Limit
	}
	ms := mulDiv(uint64(burst), uint64(r.Duration.Milliseconds()), uint64(r.Limit)) // rounded down
	phi, plo := bits.Mul64(uint64(burst), uint64(r.Duration.Milliseconds()))
	if qhi, qlo := bits.Mul64(ms, uint64(r.Limit)); qhi != phi || qlo != plo {
		ms++ // rounded up
	}
	return burst, time.Duration(min(ms, uint64(math.MaxInt64)/uint64(time.Millisecond))) * time.Millisecond
}

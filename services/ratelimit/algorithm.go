package ratelimit

import "fmt"

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

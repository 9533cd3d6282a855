package store

import (
	"cmp"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
)

// CellKey names one window cell: one key in one fixed window.
type CellKey struct {
	Workspace  string
	Namespace  string
	Identifier string
	// Duration is the key's window, in whole milliseconds, or the code of
	// a calendar (see calendar.Period.Code) or of a lease (see LeaseCode).
	Duration time.Duration
	// Sequence is the fixed window: unix ms / duration ms.
	Sequence int64
	// Refunds names the cell's refunds instead of the cell: the second
	// grow-only counter of the pair, what settled reservations gave back
	// (see the limiter's Refund). A decision weighs a cell's count less its
	// refunds. Stores keep the two apart and merge each by its own rules.
	Refunds bool
}

// CompareKeys orders keys as the global store's unique key does:
// workspace, namespace, identifier, duration, sequence, strings in byte
// order (as utf8mb4_bin compares them). Writers that upsert many rows sort
// them this way, so that concurrent upserts lock rows in one order and
// cannot deadlock each other.
func CompareKeys(a, b *CellKey) int {
	return cmp.Or(
		cmp.Compare(a.Workspace, b.Workspace),
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Identifier, b.Identifier),
		cmp.Compare(a.Duration, b.Duration),
		cmp.Compare(a.Sequence, b.Sequence),
		compareBool(a.Refunds, b.Refunds),
	)
}

// compareBool orders false before true: a cell before its refunds, which the
// global store keeps in the same row.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// ExpiresAt is when a cell of sequence and a window of durationMs ms can no
// longer affect any decision, in unix ms: the end of the window after its
// own, the last in which the sliding window weighs it (and in which a
// concurrency limit's slots counted in it may still be held: see
// LeaseCode). Stores keep a cell until then, and may drop it after. A
// durationMs that is a calendar's code (see calendar.Period.Code) names a
// calendar period, which counts only in itself but which processes still
// read as the previous cell during the next: it expires when the next
// period ends, on any zone's clock.
func ExpiresAt(sequence, durationMs int64) int64 {
	if calendar.IsCode(durationMs) {
		return calendar.LatestEnd(durationMs, sequence+1)
	}
	return (sequence + 2) * CellLength(durationMs)
}

// LatestSequence returns the latest sequence of a window of durationMs (or
// a calendar's or a lease's code) that a healthy clock can be in at now
// (unix ms): the current one and the next, which a clock a little ahead is
// in. A global store's row past it is ignored.
func LatestSequence(durationMs, now int64) int64 {
	if calendar.IsCode(durationMs) {
		return calendar.EarliestIndex(durationMs, now) + 3
	}
	return now/CellLength(durationMs) + 1
}

// leaseBase is what LeaseCode adds to a lease: 2^42 ms (139 years), past
// every window and every calendar code (under 2^41), and small enough that
// a time.Duration holds the sum.
const leaseBase = 1 << 42

// MaxLeaseMs bounds the lease a code can name: 2^32 ms, 49 days.
const MaxLeaseMs = 1 << 32

// LeaseCode returns the duration, in ms, that names the cells of a
// concurrency limit whose leases last leaseMs (1 to MaxLeaseMs): leaseBase
// plus the lease. It keeps the key's counts apart from a window of the same
// length on the same identifier, in every store, without a field of its
// own. A slot is counted in the cell of leaseMs in which it was acquired
// and is held, unless released, until that cell's window after its own
// ends: between one and two leases.
func LeaseCode(leaseMs int64) int64 { return leaseBase + leaseMs }

// IsLeaseCode reports whether durationMs is a LeaseCode.
func IsLeaseCode(durationMs int64) bool {
	return durationMs > leaseBase && durationMs <= leaseBase+MaxLeaseMs
}

// bucketBase is what BucketCode adds to the exponent of a token bucket's
// cell length: 2^43 ms, past every window, calendar and lease code, and
// small enough that a time.Duration still holds the sum.
const bucketBase = 1 << 43

// MinBucketShift and MaxBucketShift bound the exponent of a token
// bucket's cell length: 2^10 ms (about a second, the shortest window) to
// 2^35 ms (398 days, past the longest window of a year), so that a
// bucket's two cells always span its whole memory.
const (
	MinBucketShift = 10
	MaxBucketShift = 35
)

// BucketCode returns the duration, in ms, that names the cells of a token
// bucket whose cells last 2^shift ms (shift from MinBucketShift to
// MaxBucketShift). The code keeps a bucket's counts apart from every
// window of the same identifier, and the power of two keeps the code the
// same when the bucket's rate or burst changes a little: what names a
// bucket's state is its identity, not its parameters (a change that moves
// its memory past a power of two carries the bucket's level over into the
// new cells: see the limiter's bucket).
func BucketCode(shift int64) int64 { return bucketBase + shift }

// IsBucketCode reports whether durationMs is a BucketCode.
func IsBucketCode(durationMs int64) bool {
	return durationMs >= bucketBase+MinBucketShift && durationMs <= bucketBase+MaxBucketShift
}

// CellLength returns the length in ms of the cells of a window of
// durationMs: a lease code's lease, a bucket code's power of two, or
// durationMs itself. A calendar's code has no one length: callers ask
// calendar.IsCode first.
func CellLength(durationMs int64) int64 {
	switch {
	case IsLeaseCode(durationMs):
		return durationMs - leaseBase
	case IsBucketCode(durationMs):
		return 1 << (durationMs - bucketBase)
	}
	return durationMs
}

// ExpiresAt is [ExpiresAt] of k.
func (k *CellKey) ExpiresAt() int64 { return ExpiresAt(k.Sequence, k.Duration.Milliseconds()) }

// MaxCount caps every count read from a store, so that a corrupt value
// cannot overflow the decision maths: limits and costs are at most 2^53, and
// a few sums of 2^60 stay far below 2^63. A cell at the cap denies every
// request. Regional stores clamp what they return to [0, MaxCount]; the
// limiter clamps what a global store returns.
const MaxCount = 1 << 60

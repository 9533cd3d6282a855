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
	// a calendar (see calendar.Period.Code), of a concurrency limit's cell
	// (see PoolCode) or of a token bucket's cells (see BucketCode).
	Duration time.Duration
	// Sequence is the fixed window: unix ms / duration ms.
	Sequence int64
	// Refunds names the cell's refunds instead of the cell: the second
	// grow-only counter of the pair, what settled reservations gave back
	// (see the limiter's GiveBack). A decision weighs a cell's count less its
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
// own, the last in which the sliding window weighs it (for a pool's cell,
// see PoolCode, the end of the cell after it). Stores keep a cell until
// then, and may drop it after. A
// durationMs that is a calendar's code (see calendar.Period.Code) names a
// calendar period, which counts only in itself but which processes still
// read as the previous cell during the next: it expires when the next
// period ends, on any zone's clock.
func ExpiresAt(sequence, durationMs int64) int64 {
	if IsPoolCode(durationMs) {
		// A pool's cell counts until it ends; a cell longer, for the
		// clocks that run behind.
		shift, _ := PoolCodeCell(durationMs)
		return PoolCellEnd(shift, sequence+1)
	}
	if calendar.IsCode(durationMs) {
		return calendar.LatestEnd(durationMs, sequence+1)
	}
	return (sequence + 2) * CellLength(durationMs)
}

// LatestSequence returns the latest sequence of a window of durationMs (or
// a calendar's or a pool's code) that a healthy clock can be in at now
// (unix ms): the current one and the next, which a clock a little ahead is
// in. A global store's row past it is ignored.
func LatestSequence(durationMs, now int64) int64 {
	if IsPoolCode(durationMs) {
		// A slot is counted in the cell of its expiry, a lease ahead.
		shift, _ := PoolCodeCell(durationMs)
		return PoolCellOf(shift, now+MaxLeaseMs) + 1
	}
	if calendar.IsCode(durationMs) {
		return calendar.EarliestIndex(durationMs, now) + 3
	}
	return now/CellLength(durationMs) + 1
}

// A concurrency limit is one pool of slots per identity, whatever lease
// each holder chose: a slot is counted in the cell of its expiry on a grid
// fitted to its lease, and frees itself when that cell ends. The grid of
// a lease is the largest power of two seconds no longer than a tenth of
// it, at least a second (see PoolShift): a slot frees itself at its own
// lease's end, within a second or a tenth of the lease if that is longer,
// and a lease spans 10 to 20 cells of its grid at most, so that what a pool
// holds is the sum of a few dozen cells. PoolCode names one such cell,
// grid and cell index together, so that each is a key of its own in every
// store; the index is the key's Sequence too.

// poolBase is what PoolCode adds to a grid and a cell: 2^42 ms (139
// years), past every window and every calendar code (under 2^41), below
// every bucket code, and small enough that a time.Duration holds the sum.
// Grids are numbered from 1 in the bits from poolCellBits, so that no code
// of this version falls in the range of a lease's code of earlier ones
// (2^42 plus a lease of up to 2^32 ms).
const (
	poolBase     = 1 << 42
	poolCellBits = 36
)

// MinLeaseMs and MaxLeaseMs bound a slot's lease: a second, under which the
// clocks of a fleet disagree, to an hour, past which a slot a crashed
// holder held would stay taken too long (a longer call extends its lease).
// MaxPoolShift is the grid of the longest: 2^8 s.
const (
	MinLeaseMs   = 1000
	MaxLeaseMs   = 3_600_000
	MaxPoolShift = 8
)

// PoolShift returns the grid of a lease of leaseMs: the largest shift
// with 2^shift s at most a tenth of the lease, 0 (a second) for leases
// under 20 s, MaxPoolShift for the longest.
func PoolShift(leaseMs int64) int64 {
	var shift int64
	for shift < MaxPoolShift && 1000<<(shift+1) <= leaseMs/10 {
		shift++
	}
	return shift
}

// PoolCellOf returns the cell of grid shift that a slot expiring at
// expiresMs (unix ms) is counted in: the first whose end is not before
// it. The slot frees itself at that end: less than a cell late.
func PoolCellOf(shift, expiresMs int64) int64 {
	g := int64(1000) << shift
	return (expiresMs + g - 1) / g
}

// PoolCellEnd returns when the slots counted in cell of grid shift free
// themselves, in unix ms.
func PoolCellEnd(shift, cell int64) int64 { return cell * (1000 << shift) }

// PoolCode returns the duration, in ms, that names cell of grid shift (0
// to MaxPoolShift) of a concurrency limit's pool; the key's Sequence is
// cell as well.
func PoolCode(shift, cell int64) int64 {
	return poolBase + (shift+1)<<poolCellBits + cell&(1<<poolCellBits-1)
}

// IsPoolCode reports whether durationMs is a PoolCode.
func IsPoolCode(durationMs int64) bool {
	return durationMs >= poolBase+1<<poolCellBits && durationMs < poolBase+(MaxPoolShift+2)<<poolCellBits
}

// PoolCodeCell returns the grid and the cell PoolCode named by code.
func PoolCodeCell(code int64) (shift, cell int64) {
	code -= poolBase
	return code>>poolCellBits - 1, code & (1<<poolCellBits - 1)
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

// BucketCodeShift returns the exponent of the cell length a BucketCode
// names.
func BucketCodeShift(code int64) int64 { return code - bucketBase }

// IsBucketCode reports whether durationMs is a BucketCode.
func IsBucketCode(durationMs int64) bool {
	return durationMs >= bucketBase+MinBucketShift && durationMs <= bucketBase+MaxBucketShift
}

// givenBase is what GivenCode adds to the exponent of a token bucket's
// cell length: 64 past bucketBase, so that the codes of the tokens given
// back to a bucket never meet the bucket's own.
const givenBase = bucketBase + 64

// GivenCode returns the duration, in ms, that names the cells of the
// tokens given back to a token bucket whose cells last 2^shift ms (see
// BucketCode): the bucket's refunds, counted apart from its cells'
// refunds, which carry its seed (what it owed when its parameters
// changed, max-merged) and cannot carry a sum as well. They are written
// as refunds are, each process's total (see [Increment.Writer]), and on
// the same grid as the bucket's cells.
func GivenCode(shift int64) int64 { return givenBase + shift }

// GivenCodeShift returns the exponent of the cell length a GivenCode
// names.
func GivenCodeShift(code int64) int64 { return code - givenBase }

// IsGivenCode reports whether durationMs is a GivenCode.
func IsGivenCode(durationMs int64) bool {
	return durationMs >= givenBase+MinBucketShift && durationMs <= givenBase+MaxBucketShift
}

// CellLength returns the length in ms of the cells of a window of
// durationMs: a pool code's grid, a bucket code's (or a given code's)
// power of two, or durationMs itself. A calendar's code has no one length: callers ask
// calendar.IsCode first.
func CellLength(durationMs int64) int64 {
	switch {
	case IsPoolCode(durationMs):
		shift, _ := PoolCodeCell(durationMs)
		return 1000 << shift
	case IsBucketCode(durationMs):
		return 1 << (durationMs - bucketBase)
	case IsGivenCode(durationMs):
		return 1 << (durationMs - givenBase)
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

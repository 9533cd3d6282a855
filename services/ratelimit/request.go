package ratelimit

import (
	"math"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/model"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
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
	// MaxWait, when not zero, is how long the caller will wait for
	// capacity rather than be refused: a request the limit would deny but
	// that fits within MaxWait is booked now, counted where it will be
	// spent so that no one else takes it, and answered admitted with
	// Response.Wait, the time to wait before proceeding. A fixed window
	// books into its next window, to proceed when it begins; a sliding
	// window within its current fixed cell, as its previous cell's weight
	// falls, and then into the next cell, as the current one's falls (what
	// the next cell holds then counts in the current one's decisions too);
	// a token bucket on its refill schedule, at most one burst's refill
	// ahead. Requests booked on one key proceed in the order they were
	// booked, and never more than the limit admits over the booked time.
	// Not with a calendar (its next period is not booked ahead), a
	// concurrency limit, a report or a reservation.
	MaxWait time.Duration
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
	// Wait is, for a request booked ahead (see Request.MaxWait), how long
	// the caller must wait before proceeding: Success is then true and the
	// cost counted. Zero for a request admitted now, and for a denial.
	Wait time.Duration
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
	ms := model.RefillMs(burst, r.Limit, r.Duration.Milliseconds())
	return burst, time.Duration(min(ms, uint64(math.MaxInt64)/uint64(time.Millisecond))) * time.Millisecond
}

// Lease bounds: a slot frees itself at its lease's end, less than a
// second or a tenth of the lease later (see [Concurrency]), so a lease is
// a whole number of seconds from a second, under which the clocks of a
// fleet disagree, to an hour, past which a slot a crashed caller held
// would stay taken too long; a longer call extends its lease.
const (
	MinLease = store.MinLeaseMs * time.Millisecond
	MaxLease = store.MaxLeaseMs * time.Millisecond
)

// Acquisition asks for Cost slots of a concurrency limit: at most Limit
// slots of Namespace and Identifier held at once, each freed by its
// release or, at the latest, when its lease runs out. One limit is one
// pool whatever lease each holder chose: the lease is a parameter of the
// slot, not the limit's name.
type Acquisition struct {
	Workspace  string
	Namespace  string
	Identifier string
	// Limit is how many slots may be held at once, 1 to [MaxLimit] (0,
	// where the caller allows it, refuses every acquisition).
	Limit int64
	// Lease is how long a slot is held at most if it is not released:
	// whole seconds, [MinLease] to [MaxLease].
	Lease time.Duration
	// Cost is how many slots, 1 to [MaxCost].
	Cost int64
}

// Slot is a held slot as its holder names it to release or extend it: the
// limit's name and numbers, and the cell it was counted in.
type Slot struct {
	Workspace  string
	Namespace  string
	Identifier string
	Limit      int64
	// Lease is the lease the slot was acquired or last extended with:
	// it names the grid of its cell.
	Lease time.Duration
	// Sequence is the cell the slot was counted in (see [LeaseCell]).
	Sequence int64
	// Cost is how many slots it holds.
	Cost int64
}

// ExpiresAt is when sl frees itself if it is neither released nor
// extended: its lease's end, less than a second or a tenth of the lease
// later.
func (sl *Slot) ExpiresAt() time.Time { return LeaseEnd(sl.Lease, sl.Sequence) }

// Hold returns what sl holds, to give back.
func (sl *Slot) Hold() Hold {
	return Hold{Kind: Slots, Workspace: sl.Workspace, Namespace: sl.Namespace, Identifier: sl.Identifier,
		Duration: sl.Lease, Limit: sl.Limit, Sequence: sl.Sequence, Amount: sl.Cost}
}

// Hold is what an admitted reservation or acquisition holds, as its
// holder names it to give it back (x/time/rate's Reservation is the
// shape): the limit, the cell its amount was counted in, and how much.
// A reservation holds the estimate of a request with [Request.Reserve]
// in a window's cell; an acquisition holds slots of a concurrency limit
// in the pool cell of their expiry (see [Slot.Hold]).
//
// What is given back is a count of its own: each key has, beside its
// window, a window of what was given back, whose cells are grow-only
// counters like the key's, replayed to the regional store and published
// to the global store by the same rules (own component only, max-merge,
// imports never published again). A decision weighs a cell's count less
// what was given back, never below zero. The caller bounds the amount by
// what was held and gives a hold back once (see package reservation of
// the API): a second give-back of slots would free another holder's.
type Hold struct {
	// Kind is what is held: a reservation's estimate or slots.
	Kind       HoldKind
	Workspace  string
	Namespace  string
	Identifier string
	// Duration is a reservation's window, or the lease slots were
	// acquired or last extended with (it names the grid of their cell).
	Duration time.Duration
	// Limit is the limit's, as the holder was admitted under it.
	Limit int64
	// Sequence is the cell the amount was counted in: a reservation's
	// fixed window (see [CellOf]), slots' pool cell (see [LeaseCell]).
	Sequence int64
	// Amount is what to give back, 0 to [MaxCost].
	Amount int64
}

// HoldKind is what a [Hold] holds.
type HoldKind uint8

// The kinds of hold.
const (
	// Reserved is a reservation's estimate: giving it back refunds what
	// the caller reserved and did not spend.
	Reserved HoldKind = iota
	// Slots are slots of a concurrency limit: giving them back releases
	// them.
	Slots
)

// CellOf returns the fixed window a response of a window of duration
// counted in: the one that ends at its Reset.
func CellOf(resp Response, duration time.Duration) int64 {
	ms := duration.Milliseconds()
	if ms <= 0 {
		return 0
	}
	return resp.Reset.UnixMilli()/ms - 1
}

// LeaseCell returns the cell that the slots of a lease of lease, which an
// acquisition or extension answered with resp, are counted in: the one
// that ends at resp.Reset.
func LeaseCell(resp Response, lease time.Duration) int64 {
	return store.PoolCellOf(store.PoolShift(lease.Milliseconds()), resp.Reset.UnixMilli())
}

// LeaseEnd returns when the slots of a lease of lease counted in cell
// free themselves if they are not released: the cell's end.
func LeaseEnd(lease time.Duration, cell int64) time.Time {
	return time.UnixMilli(period.OfLease(lease.Milliseconds(), cell).CellEnd())
}

package store

import (
	"context"
	"errors"
	"time"
)

// Regional is the store that the processes of one region share (Redis, one
// server or a cluster: package redisstore). Processes add what they
// accepted to it and read from it what the others accepted. The limiter
// waits on it only for a cold cell, a strict key (at most once per refresh
// interval) and a key whose copy has aged, each at most [RequestTimeout],
// and decides from local state for every cell the store could not serve.
//
// A regional store fails fast where it knows a server is down (a circuit
// breaker, returning an error that wraps [ErrUnavailable]) and answers per
// cell: a store whose cells live on several servers, such as a Redis
// Cluster, answers the cells of its healthy servers and marks only the
// others as failed, so that one server's trouble stays with its own keys.
type Regional interface {
	// Load returns the count of each cell, in order. A cell the store does
	// not hold counts 0. When some cells could not be read, it returns the
	// counts with -1 for those and a [*PartialError]; when none could, an
	// error.
	Load(ctx context.Context, keys []CellKey) ([]int64, error)
	// Increment adds each increment's delta to its cell, raises the cell to
	// its Floor if it then holds less (max-merge), keeps the cell until at
	// least its TTL has passed, and returns the new counts, in order; a
	// cell named twice receives both. Increment, floor and expiry are one
	// atomic step per cell, so no cell is ever left without an expiry. On
	// error, counts may still be returned: a count of -1 marks an increment
	// that may not have been applied (the caller sends it again, preferring
	// to count twice over losing a count), any other count one that was.
	//
	// An increment with a Writer (a cell's refunds, a concurrency limit's
	// slots: see [Increment.Writer]) is a total instead: the store keeps
	// the largest Total each writer sent and adds to the cell what that
	// writer's largest grew by, so that the cell holds the sum of the
	// totals (and any increments), and a total sent twice, or applied and
	// then timed out and sent again, counts once.
	Increment(ctx context.Context, incs []Increment) (counts []int64, err error)
}

// Increment adds Delta to a cell.
type Increment struct {
	Key CellKey
	// Delta is what to add: accepted cost not yet sent, zero or more.
	Delta int64
	// Floor is the least the cell must hold afterwards: what the caller
	// knows the store held (what it sent before and what it read) plus
	// Delta. A store that lost its data (a Redis restarted without
	// persistence, a cluster master back empty) is re-seeded by it with
	// the counts the processes still hold, by the G-Counter's own rule:
	// max-merge, never a sum, so processes that re-seed at once do not add
	// up. 0 asks nothing.
	Floor int64
	// Mark, if above 0, is the cell's limit, and asks a store that
	// implements [Unpublished] to index the cell as one the region
	// publishes to the global store: so that any process of the region can
	// publish it if the one that counted it cannot (it died, or stopped
	// while the global store was down).
	Mark int64
	// TTL is how long the store must keep the cell: until the end of the
	// window after it, the last window in which it counts.
	TTL time.Duration
	// Writer, if not empty, names the process that gives back into a
	// cell's refunds (Key.Refunds), or that counts slots of a concurrency
	// limit (see [SlotTaker]), and makes the increment idempotent: Total
	// is everything that writer wrote into the cell so far, the store
	// keeps the largest Total of each writer, and the cell grows by what
	// each writer's largest grew by: it holds the sum of those (Delta and
	// Floor are not used). Counts are counted twice
	// rather than lost, which errs strict; a refund counted twice would
	// give back what another holder still uses, and a slot counted twice
	// is held by no one, so those are totals, as the global store's
	// components are. A store that lost its data learns each writer's
	// total again from its next write.
	Writer string
	Total  int64
}

// PartialError is returned by [Regional.Load] and [Regional.Increment] when
// the store answered for some cells but not for others (their counts are
// -1): one bad key, or one server of several that is down. The limiter uses
// what it got and retries the rest.
type PartialError struct {
	// Err is why the failed cells failed (the first such error).
	Err error
}

// Error returns Err's message.
func (e *PartialError) Error() string { return e.Err.Error() }

// Unwrap returns Err, so that errors.Is sees through a partial answer.
func (e *PartialError) Unwrap() error { return e.Err }

// ErrUnavailable is wrapped by the errors of a regional store that did not
// send a call because it knows the server is down (its circuit breaker is
// open). The limiter counts such calls as rejected rather than failed.
var ErrUnavailable = errors.New("regional store unavailable: circuit breaker open")

// RequestTimeout bounds a call to the regional store on the request path
// (the read of a cold cell, of a strict or of a long-idle one): a request
// waits at most this long. Clients of a regional store should fail a dial
// or a wait for a pooled connection within it too.
const RequestTimeout = 300 * time.Millisecond

// Unpublished is a regional store that indexes the cells its increments mark
// (see [Increment.Mark]), so that what a process counted reaches the global
// store even if that process never publishes it: every process of the
// region with a global store publishes the marked cells that no increment
// has marked for a while (their counter's flushes would have published them
// by then), with the count the regional store holds, the region's truth.
// Package redisstore implements it; without it, what a process counted and
// did not publish before it died is lost to the other regions.
type Unpublished interface {
	// Idle returns up to max marked cells whose last mark is before
	// before, with the count the store holds (0 for one that expired) and
	// the limit of their last mark.
	Idle(ctx context.Context, before time.Time, max int) ([]IdleCell, error)
	// Forget drops cells Idle returned from the index, but those marked
	// again since.
	Forget(ctx context.Context, cells []IdleCell) error
}

// IdleCell is a marked cell that no increment marked for a while.
type IdleCell struct {
	// CellCount is the cell, the count the regional store holds and the
	// limit it was marked with.
	CellCount
	// MarkedAt is the time of its last mark, in unix ms by the store's
	// records: Forget keeps a cell marked again since.
	MarkedAt int64
}

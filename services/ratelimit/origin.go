package ratelimit

import (
	"context"
	"errors"
	"time"
)

// Origin is the regional source of truth: a store that the processes of one
// region share (Redis, one server or a cluster: package redisorigin).
// Processes add what they accepted to it and read from it what the others
// accepted. The limiter waits on it only for a cold cell, a strict key (at
// most once per refresh interval) and a key whose copy is older than
// maxCopyAge, each at most OriginTimeout, and decides from local state for
// every cell the origin could not serve.
//
// An origin fails fast where it knows a server is down (a circuit breaker,
// returning an error that wraps [ErrUnavailable]) and answers per cell: an
// origin whose cells live on several servers, such as a Redis Cluster,
// answers the cells of its healthy servers and marks only the others as
// failed, so that one server's trouble stays with its own keys.
type Origin interface {
	// Load returns the count of each cell, in order. A cell the origin does
	// not hold counts 0. When some cells could not be read, it returns the
	// counts with -1 for those and a [*PartialError]; when none could, an
	// error.
	Load(ctx context.Context, cells []Cell) ([]int64, error)
	// Increment adds each increment's delta to its cell, keeps the cell until
	// at least its TTL has passed, and returns the new counts, in order.
	// Increment and expiry are one atomic step per cell, so no cell is ever
	// left without an expiry. On error, counts may still be returned: a count
	// of -1 marks an increment that may not have been applied (the caller
	// sends it again, preferring to count twice over losing a count), any
	// other count one that was.
	Increment(ctx context.Context, incs []Increment) (counts []int64, err error)
}

// PartialError is returned by [Origin.Load] and [Origin.Increment] when the
// origin answered for some cells but not for others (their counts are -1):
// one bad key, or one server of several that is down. The limiter uses
// what it got and retries the rest.
type PartialError struct{ Err error }

func (e *PartialError) Error() string { return e.Err.Error() }
func (e *PartialError) Unwrap() error { return e.Err }

// ErrUnavailable is wrapped by the errors of an origin that did not send a
// call because it knows the server is down (its circuit breaker is open).
// The limiter counts such calls as rejected rather than failed.
var ErrUnavailable = errors.New("origin unavailable: circuit breaker open")

// Cell names one fixed window cell: one key in one sequence.
type Cell struct {
	Workspace  string
	Namespace  string
	Identifier string
	Duration   time.Duration
	// Sequence is the fixed window: unix ms / duration ms.
	Sequence int64
}

// Increment adds Delta to a cell.
type Increment struct {
	Cell  Cell
	Delta int64
	// TTL is how long the origin must keep the cell: until the end of the
	// window after it, the last window in which it counts.
	TTL time.Duration
}

// OriginTimeout bounds a call to the origin on the request path (hydration
// of a cold cell, the read of a strict or long-idle one): a request waits at
// most this long. Origin clients should fail a dial or a wait for a pooled
// connection within it too.
const OriginTimeout = 300 * time.Millisecond

// Tuning of the regional origin. Unlike the global intervals, which trade
// MySQL load against cross-region latency and are the operator's to set,
// these are package constants: they are already far below what a request
// notices (milliseconds), and per-process knobs would only let processes of
// one region drift apart.
const (
	// replayInterval is how often accepted increments are sent to the origin.
	// Another process sees them at most this long (plus a round trip) after
	// they were accepted; in that time all increments of one cell coalesce
	// into one command.
	replayInterval = 10 * time.Millisecond
	// replayTimeout bounds one background round trip (replay or refresh). A
	// pipeline of a few thousand cells takes milliseconds; a stuck server
	// must fail calls fast enough for the origin's circuit breaker to open
	// within seconds.
	replayTimeout = 500 * time.Millisecond
	// freshnessInterval is how old a warm window's last origin read may be
	// before a request on it starts a background refresh. The request itself
	// decides from memory and never waits. A key with a request at least
	// this often is refreshed before its copy reaches maxCopyAge, so it
	// never waits on the origin.
	freshnessInterval = 500 * time.Millisecond
	// maxCopyAge is the oldest copy of the region's counts a decision may
	// rely on. A request on a window whose last origin read began longer ago
	// (a key that sat idle) reads the origin first, as for a cold cell:
	// otherwise a process would admit from what it knew before the idle
	// spell, while other processes spent the budget. Requests that arrive
	// during that read wait for it instead of asking again.
	maxCopyAge = time.Second
	// strictRefreshInterval is how often, at most, a strict window (one that
	// denied within the last duration) refreshes from the origin before
	// deciding; windows under 10 s refresh every hundredth of their length.
	// At most one request per window and interval pays the round trip; the
	// others decide from memory, so abuse cannot become one origin read per
	// request.
	strictRefreshInterval = 100 * time.Millisecond
	// strictHeadroom: an admission that leaves at most this share of the
	// limit makes the key strict, as a denial does.
	strictHeadroom = 0.2
	// maxQueued bounds the cells waiting for replay or for a prompt
	// global flush, and the windows waiting for a refresh. A cell is in each
	// cell queue at most once at a time, and a window is queued for refresh
	// about once per freshness interval, so the queues hold about the active
	// cells; the bound only matters past a million of them.
	maxQueued = 1 << 20
)

// WithOrigin makes the processes of a region share counts through origin.
func WithOrigin(origin Origin) Option {
	return func(s *Service) { s.origin = origin }
}

// Package store is the contract between package analytics and the stores
// that keep its counts: [Store], which adds minutes and answers series and
// top identifiers, and [Fleet], the processes' roll call, with the values
// they exchange. Package storetest holds the suites every store runs;
// memstore and mysqlstore implement them.
package store

import (
	"context"
	"time"
)

// Granularity is the length of a bucket.
type Granularity uint8

// The granularities, as the tables store them.
const (
	Minute Granularity = 1
	Hour   Granularity = 2
	Day    Granularity = 3
)

// Duration returns the bucket's length.
func (g Granularity) Duration() time.Duration {
	switch g {
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	}
	return time.Minute
}

// String names g as the API does.
func (g Granularity) String() string {
	switch g {
	case Hour:
		return "hour"
	case Day:
		return "day"
	}
	return "minute"
}

// Bucket is a namespace's decisions in one bucket: those that admitted,
// those that refused, and the shadow decisions that admitted where their
// limit would have refused (counted apart: a shadow limit's rollout).
type Bucket struct {
	Workspace, Namespace string
	// Start is the bucket's start.
	Start                        time.Time
	Passed, Denied, ShadowDenied int64
}

// Entry is a named identifier's decisions in one bucket.
type Entry struct {
	Bucket
	Identifier string
}

// Point is one bucket of a series.
type Point struct {
	Start                        time.Time
	Passed, Denied, ShadowDenied int64
}

// Identifier is a named identifier's decisions over a query's range.
type Identifier struct {
	Identifier                   string
	Passed, Denied, ShadowDenied int64
}

// Store keeps the minutes the processes add and answers queries over them
// (and the hours and days rolled up from them, in a store that keeps
// those).
type Store interface {
	// Add adds minute buckets and named identifiers to what the store
	// holds, once per batch: a second Add of the same batch id (a flush
	// sent again because the answer to the first was lost, though it may
	// have been applied) changes nothing and returns nil. A batch id names
	// one process's flush; a store remembers it for at least an hour.
	Add(ctx context.Context, batch string, buckets []Bucket, top []Entry) error
	// Series returns the buckets of g of a namespace in [from, to), oldest
	// first, those with no decision left out.
	Series(ctx context.Context, workspace, namespace string, g Granularity, from, to time.Time) ([]Point, error)
	// Top returns up to n identifiers of a namespace named in [from, to),
	// the most denied first, then the most shadow-denied, then the
	// busiest.
	Top(ctx context.Context, workspace, namespace string, from, to time.Time, n int) ([]Identifier, error)
	// Namespaces returns up to n namespaces of a workspace with decisions
	// in [from, to), with their totals (as Identifiers named by
	// namespace), the most denied first, then the most shadow-denied, then
	// the busiest.
	Namespaces(ctx context.Context, workspace string, from, to time.Time, n int) ([]Identifier, error)
}

// Process is one API process's roll call.
type Process struct {
	ID, Region string
	// SeenAt is when it last reported, by the store's clock.
	SeenAt time.Time
	// LastSync is when its latest read of the other regions began (zero:
	// never, or no global store).
	LastSync time.Time
	// Breakers is the state of each of its Redis nodes' circuit breakers.
	Breakers map[string]string
	// FlushInterval is how often it reports: its recorder's flush interval
	// (zero from a process of an earlier version, which did not say; see
	// Live).
	FlushInterval time.Duration
}

// Gone: when a process that stopped reporting is told from one between
// reports. A live process reports every flush interval, after the flush's
// store write, which may itself take up to an interval: two reports of a
// live process are at most about two intervals apart.
const (
	// DefaultReportInterval is the flush interval of a process that did not
	// say its own: the recorder's default (analytics.DefaultFlushInterval).
	DefaultReportInterval = 10 * time.Second
	// MissedReports is how many of its flush intervals a process may go
	// without reporting before it is gone.
	MissedReports = 3
	// MinGoneAfter is the least silence that makes a process gone, so that
	// a short interval's hiccup (a slow write, a pause) does not.
	MinGoneAfter = 5 * time.Second
)

// ReportInterval returns how often p reports: its FlushInterval, or
// DefaultReportInterval if it did not say.
func (p Process) ReportInterval() time.Duration {
	if p.FlushInterval <= 0 {
		return DefaultReportInterval
	}
	return p.FlushInterval
}

// GoneAfter returns how long p may go without reporting before it is gone:
// MissedReports of its ReportInterval, at least MinGoneAfter.
func (p Process) GoneAfter() time.Duration {
	return max(MissedReports*p.ReportInterval(), MinGoneAfter)
}

// Live reports whether p still reports at now, by the store's clock: its
// last report is at most GoneAfter old.
func (p Process) Live(now time.Time) bool {
	return now.Sub(p.SeenAt) <= p.GoneAfter()
}

// Fleet records the processes' roll calls.
type Fleet interface {
	// Seen records p's roll call.
	Seen(ctx context.Context, p Process) error
	// Processes returns the processes seen within the last since, and the
	// store's time now.
	Processes(ctx context.Context, since time.Duration) ([]Process, time.Time, error)
}

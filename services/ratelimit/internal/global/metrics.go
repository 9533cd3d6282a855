package global

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the tier's own metrics, made and registered by the limiter
// with the rest of its metrics (their names stay the limiter's).
type Metrics struct {
	// Writes counts rows published; WriteErrors flushes that failed.
	Writes, WriteErrors prometheus.Counter
	// RowsApplied counts imported rows that reached a cell; SyncErrors
	// syncs that failed; LastSync is when the latest that succeeded
	// began (unix seconds).
	RowsApplied, SyncErrors prometheus.Counter
	LastSync                prometheus.Gauge
	// EntriesCreated counts windows a sync created; RowsLastPoll is what
	// the latest sync read; RowsFuture counts rows ignored as a window
	// or more ahead of this process's clock.
	EntriesCreated prometheus.Counter
	RowsLastPoll   prometheus.Gauge
	RowsFuture     prometheus.Counter
	// IdlePublished counts cells published from the regional store's
	// index of cells to publish.
	IdlePublished prometheus.Counter
	// Rejected counts rows not imported because their workspace held the
	// most windows allowed; Overflow, cells that did not fit in the
	// prompt flush's queue.
	Rejected, Overflow prometheus.Counter
}

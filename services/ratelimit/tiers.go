package ratelimit

import (
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// WithRegionalStore makes the processes of a region share counts through
// st (see [store.Regional]).
func WithRegionalStore(st store.Regional) Option {
	return func(s *settings) { s.regional = st }
}

// Default intervals of the global counters. A region's usage reaches
// another region within one flush plus one sync interval (plus jitter): 2.4 s
// at most with these, where 10 s each (the conservative setting, a tenth of
// the MySQL writes of busy cells and a tenth of the idle reads) takes up to
// 24 s, two fifths of a 60 s window. Idle, a process costs one statement per
// sync (an index-only count that finds nothing changed) and none per flush.
const (
	// DefaultGlobalFlushInterval is how often a process publishes the cells
	// that crossed their floor or grew by a flush step since the
	// store last held them: what other regions must learn soon.
	DefaultGlobalFlushInterval = time.Second
	// DefaultGlobalFullFlushInterval is how often a process publishes every
	// cell worth sharing that grew at all, however little: the slow
	// schedule, which also catches a cell whose region count grew through
	// other processes of the region only.
	DefaultGlobalFullFlushInterval = 10 * time.Second
	// DefaultGlobalSyncInterval is how often a process reads what changed
	// in the other regions.
	DefaultGlobalSyncInterval = time.Second
)

// Default budgets of one call to the global store.
const (
	// DefaultGlobalFlushTimeout bounds one flush: its statements (a bulk
	// upsert per chunk of rows), not the set-up of a connection, which the
	// store bounds on its own.
	DefaultGlobalFlushTimeout = 10 * time.Second
	// DefaultGlobalSyncTimeout bounds one sync: its two statements (the
	// count of changed rows, then the rows), each of which a slow database
	// may hold for seconds. A sync that runs out is counted and the next
	// one starts at its own tick; a flush runs meanwhile on its own loop.
	DefaultGlobalSyncTimeout = 30 * time.Second
)

// WithGlobalStore makes the region share counts with other regions through
// st (see [store.Global]).
func WithGlobalStore(st store.Global) Option {
	return func(s *settings) { s.global = st }
}

// WithGlobalFlushIntervals sets how often the process publishes to the
// global store: every prompt, the cells that crossed their floor or grew by
// a flush step (at most a tenth of their limit) since the store last held
// them; every
// full, every cell worth sharing that grew at all. full is raised to prompt
// if below it. Zero or negative values keep the defaults
// ([DefaultGlobalFlushInterval], [DefaultGlobalFullFlushInterval]).
func WithGlobalFlushIntervals(prompt, full time.Duration) Option {
	return func(s *settings) {
		if prompt > 0 {
			s.globalEvery.Flush = prompt
		}
		if full > 0 {
			s.globalEvery.FullFlush = full
		}
	}
}

// WithGlobalSyncInterval sets how often the process reads the other regions'
// changes from the global store. Zero or negative keeps
// [DefaultGlobalSyncInterval].
func WithGlobalSyncInterval(d time.Duration) Option {
	return func(s *settings) {
		if d > 0 {
			s.globalEvery.Sync = d
		}
	}
}

// WithGlobalTimeouts sets how long one flush and one sync of the global
// store may take ([DefaultGlobalFlushTimeout], [DefaultGlobalSyncTimeout]
// for zero or negative values). A database that answers slowly but
// answers keeps imports going as long as a sync fits in its budget.
func WithGlobalTimeouts(flush, sync time.Duration) Option {
	return func(s *settings) {
		if flush > 0 {
			s.globalEvery.FlushTimeout = flush
		}
		if sync > 0 {
			s.globalEvery.SyncTimeout = sync
		}
	}
}

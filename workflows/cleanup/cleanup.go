// Package cleanup is the cron-like job that keeps the shared tables within
// their retention. Each run deletes the expired rows of
// ratelimit_window_counts; purges the override tombstones older than
// overrides.TombstoneRetention, the audit entries older than
// audit.Retention and the records of settled reservations whose tokens
// have expired; rolls the analytics' minutes up into hours and days; and
// purges the analytics past their retention and the roll call of
// processes long gone (run.go).
//
// It is a Restate virtual object: each key is one schedule (schedule.go),
// whose runs delete rows in bounded batches, each batch a durable step
// (purge.go), and then send the next run to the same key with a delay.
// Restate keeps the chain alive across restarts of the worker and of
// restate-server; the object's exclusive handlers keep it to one chain per
// key however often it is started.
package cleanup

import (
	"context"
	"time"

	restate "github.com/restatedev/sdk-go"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/durable"
	"github.com/unkeyed/ratelimit/services/audit"
)

// ServiceName is the Restate service name of the cleanup object.
const ServiceName = "Cleanup"

// DefaultKey names the schedule the worker starts: it keeps every table
// within its retention.
const DefaultKey = "retention"

// LegacyKey named the worker's schedule until it ran more than the window
// counts' deletion. A worker stops a schedule under it when it starts
// DefaultKey's, so an upgraded deployment runs one chain; Status and Stop
// still answer under it.
const LegacyKey = "window-counts"

// Defaults of a schedule. Rows expire two windows after their sequence, and
// the limiter never reads expired rows, so cleanup only bounds the table's
// size: every five minutes keeps it within minutes of its live size.
const (
	DefaultInterval = 5 * time.Minute
	minInterval     = time.Second
	maxInterval     = 24 * time.Hour
	// DefaultBatchSize rows go in one DELETE: small enough to hold locks
	// for milliseconds, large enough that 100 of them clear 100,000 rows.
	DefaultBatchSize = 1000
	// DefaultMaxBatches bounds one run; a run that hits the bound schedules
	// the next one right away instead of after the interval.
	DefaultMaxBatches = 100
	backlogDelay      = time.Second
)

// Store is what the job needs of the database: db.Queries has it.
type Store interface {
	WindowCountsNow(ctx context.Context) (int64, error)
	WindowCountsExpiredBatch(ctx context.Context, arg db.WindowCountsExpiredBatchParams) (db.WindowCountsExpiredBatchRow, error)
	WindowCountsDeleteBatch(ctx context.Context, arg db.WindowCountsDeleteBatchParams) (int64, error)
	OverridePurgeBatch(ctx context.Context, arg db.OverridePurgeBatchParams) (db.OverridePurgeBatchRow, error)
	OverridePurgeDeleted(ctx context.Context, arg db.OverridePurgeDeletedParams) (int64, error)
	AuditPurgeBatch(ctx context.Context, arg db.AuditPurgeBatchParams) (db.AuditPurgeBatchRow, error)
	AuditPurge(ctx context.Context, arg db.AuditPurgeParams) (int64, error)
	SettlementsPurgeBatch(ctx context.Context, arg db.SettlementsPurgeBatchParams) (db.SettlementsPurgeBatchRow, error)
	SettlementsPurge(ctx context.Context, arg db.SettlementsPurgeParams) (int64, error)
	AnalyticsRollup(ctx context.Context, arg db.AnalyticsRollupParams) error
	AnalyticsTopClear(ctx context.Context, arg db.AnalyticsTopClearParams) error
	AnalyticsTopRollup(ctx context.Context, coarse, fine uint8, bucket, bucketEnd int64, maxRows int) error
	AnalyticsPurge(ctx context.Context, arg db.AnalyticsPurgeParams) (int64, error)
	AnalyticsTopPurge(ctx context.Context, arg db.AnalyticsTopPurgeParams) (int64, error)
	ProcessesPurge(ctx context.Context, seenAt uint64) (int64, error)
	PenaltiesPurge(ctx context.Context, arg db.PenaltiesPurgeParams) (int64, error)
}

// Cleanup is the Restate virtual object. Bind it with restate.Reflect.
type Cleanup struct {
	store          Store
	batchSize      int32
	maxBatches     int
	auditRetention time.Duration
}

// Option configures a Cleanup.
type Option func(*Cleanup)

// WithBatches sets the rows per DELETE and the DELETEs per run.
func WithBatches(size int32, perRun int) Option {
	return func(c *Cleanup) { c.batchSize, c.maxBatches = size, perRun }
}

// WithAuditRetention sets how long audit log entries are kept
// (audit.Retention).
func WithAuditRetention(d time.Duration) Option {
	return func(c *Cleanup) { c.auditRetention = d }
}

// New returns the cleanup object on store.
func New(store Store, opts ...Option) *Cleanup {
	c := &Cleanup{store: store, batchSize: DefaultBatchSize, maxBatches: DefaultMaxBatches, auditRetention: audit.Retention}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// ServiceName names the object for Restate.
func (*Cleanup) ServiceName() string { return ServiceName }

// Definition returns the object on store, with the invocation retry policy
// that keeps its schedule alive through any outage (durable.RetryForever),
// for binding to a Restate endpoint.
func Definition(store Store, opts ...Option) restate.ServiceDefinition {
	return restate.Reflect(New(store, opts...), durable.RetryForever())
}

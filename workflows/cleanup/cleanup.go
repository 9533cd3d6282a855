// Package cleanup is the cron-like job that deletes expired rows of
// ratelimit_window_counts, the tombstones of overrides deleted more than
// overrides.TombstoneRetention ago, and audit log entries older than the
// audit retention (DefaultAuditRetention). It is a Restate virtual object: each key
// is one schedule, whose runs delete rows in bounded batches, each batch a
// durable step, and then send the next run to the same key with a delay.
// Restate keeps the chain alive across restarts of the worker and of
// restate-server; the object's exclusive handlers keep it to one chain per
// key however often it is started.
package cleanup

import (
	"context"
	"fmt"
	"time"

	restate "github.com/restatedev/sdk-go"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/durable"
	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/overrides"
)

// ServiceName is the Restate service name of the cleanup object.
const ServiceName = "Cleanup"

// DefaultKey names the schedule the worker starts.
const DefaultKey = "window-counts"

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
	// DefaultAuditRetention is how long the audit log keeps an entry: a
	// quarter, long enough to answer "who changed this" after an incident
	// review, short enough to bound the table.
	DefaultAuditRetention = 90 * 24 * time.Hour
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
// (DefaultAuditRetention).
func WithAuditRetention(d time.Duration) Option {
	return func(c *Cleanup) { c.auditRetention = d }
}

// New returns the cleanup object on store.
func New(store Store, opts ...Option) *Cleanup {
	c := &Cleanup{store: store, batchSize: DefaultBatchSize, maxBatches: DefaultMaxBatches, auditRetention: DefaultAuditRetention}
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

// StartRequest starts a schedule.
type StartRequest struct {
	// IntervalSeconds between runs; 0 keeps the schedule's interval (or the
	// default of 300 for a new schedule). Changing it on a running schedule
	// replaces the pending run with one that starts at once.
	IntervalSeconds int64 `json:"intervalSeconds,omitempty"`
}

// RunRequest is the input of a run. Runs carry the token of the chain that
// sent them, so a run of a chain that was stopped does nothing.
type RunRequest struct {
	Chain string `json:"chain"`
}

// Status is what a schedule reports.
type Status struct {
	Scheduled       bool      `json:"scheduled"`
	IntervalSeconds int64     `json:"intervalSeconds"`
	Runs            int64     `json:"runs"`
	LastRun         time.Time `json:"lastRun,omitzero"`
	LastRunDeleted  int64     `json:"lastRunDeleted"`
	LastRunBatches  int       `json:"lastRunBatches"`
	TotalDeleted    int64     `json:"totalDeleted"`
	// LastRunPurged and TotalPurged count the override tombstones purged.
	LastRunPurged int64 `json:"lastRunPurged"`
	TotalPurged   int64 `json:"totalPurged"`
	// LastRunAuditPurged and TotalAuditPurged count the audit log entries
	// purged.
	LastRunAuditPurged int64 `json:"lastRunAuditPurged"`
	TotalAuditPurged   int64 `json:"totalAuditPurged"`
	// LastRunSettlementsPurged and TotalSettlementsPurged count the
	// records of settled reservations purged once those could no longer
	// be settled.
	LastRunSettlementsPurged int64 `json:"lastRunSettlementsPurged"`
	TotalSettlementsPurged   int64 `json:"totalSettlementsPurged"`
	// LastRunAnalyticsPurged and TotalAnalyticsPurged count the analytics
	// rows (buckets and named identifiers) purged past their retention.
	LastRunAnalyticsPurged int64     `json:"lastRunAnalyticsPurged"`
	TotalAnalyticsPurged   int64     `json:"totalAnalyticsPurged"`
	NextRun                time.Time `json:"nextRun,omitzero"`
	// Running reports, when Status answers, whether a scheduled chain is
	// alive: its next run is not overdue by more than twice the interval
	// and ten seconds. A chain that is not running is waiting on a worker
	// or a database that is down (its run is retried until they are back),
	// or stopped.
	Running bool `json:"running"`
	// OverdueSeconds is how long the next run is past its time, 0 if it
	// is not.
	OverdueSeconds int64 `json:"overdueSeconds"`
}

const (
	stateStatus  = "status"
	stateChain   = "chain"
	statePending = "pending" // invocation id of the scheduled run
)

// Start starts the schedule unless it is running already; then it only
// updates the interval if one is given. The first run starts at once.
func (c *Cleanup) Start(ctx restate.ObjectContext, req StartRequest) (Status, error) {
	st, err := restate.Get[Status](ctx, stateStatus)
	if err != nil {
		return Status{}, err
	}
	changed := false
	if req.IntervalSeconds != 0 {
		// Compare in seconds before converting: a large count of seconds
		// would overflow time.Duration and wrap into the allowed range.
		if req.IntervalSeconds < int64(minInterval/time.Second) || req.IntervalSeconds > int64(maxInterval/time.Second) {
			return Status{}, restate.TerminalErrorf("intervalSeconds: must be between %d and %d", int64(minInterval/time.Second), int64(maxInterval/time.Second))
		}
		changed = st.IntervalSeconds != 0 && st.IntervalSeconds != req.IntervalSeconds
		st.IntervalSeconds = req.IntervalSeconds
	}
	if st.IntervalSeconds == 0 {
		st.IntervalSeconds = int64(DefaultInterval / time.Second)
	}
	chain, err := restate.Get[string](ctx, stateChain)
	if err != nil {
		return Status{}, err
	}
	if chain != "" && changed {
		// Replace the pending run, which waits out the old interval, by one
		// that runs now: still one chain, one pending run.
		if err := cancelPending(ctx); err != nil {
			return Status{}, err
		}
		now, nowErr := nowMs(ctx)
		if nowErr != nil {
			return Status{}, nowErr
		}
		st.NextRun = time.UnixMilli(now).UTC()
		schedule(ctx, chain, 0)
	}
	if chain == "" {
		chain = restate.UUID(ctx).String()
		restate.Set(ctx, stateChain, chain)
		now, nowErr := nowMs(ctx)
		if nowErr != nil {
			return Status{}, nowErr
		}
		st.Scheduled = true
		st.NextRun = time.UnixMilli(now).UTC()
		schedule(ctx, chain, 0)
	}
	restate.Set(ctx, stateStatus, st)
	return st, nil
}

// Stop ends the schedule: its pending run finds the chain gone and does
// nothing. Start begins a new chain.
func (c *Cleanup) Stop(ctx restate.ObjectContext) (Status, error) {
	st, err := restate.Get[Status](ctx, stateStatus)
	if err != nil {
		return Status{}, err
	}
	if err := cancelPending(ctx); err != nil {
		return Status{}, err
	}
	restate.Clear(ctx, stateChain)
	st.Scheduled = false
	st.NextRun = time.Time{}
	restate.Set(ctx, stateStatus, st)
	return st, nil
}

// Run deletes the rows that expired before the run began by the
// database's clock (one clock whichever worker runs it), then the
// override tombstones older than overrides.TombstoneRetention, then the
// audit log entries older than the audit retention, in batches:
// each batch is counted in one durable step and deleted in the next, so a
// run interrupted by a crash resumes after its last finished step, and a
// batch deleted again after a crash is counted once. Then it sends the next
// run to itself.
func (c *Cleanup) Run(ctx restate.ObjectContext, req RunRequest) error {
	chain, err := restate.Get[string](ctx, stateChain)
	if err != nil {
		return err
	}
	if chain == "" || chain != req.Chain {
		return nil // a run of a stopped or replaced chain
	}
	st, err := restate.Get[Status](ctx, stateStatus)
	if err != nil {
		return err
	}
	now, nowErr := restate.Run(ctx, func(rc restate.RunContext) (int64, error) { return c.store.WindowCountsNow(rc) },
		restate.WithName("the database's clock"))
	if nowErr != nil {
		return nowErr
	}
	var deleted int64
	batches := 0
	full := false
	for batches < c.maxBatches {
		b, err := restate.Run(ctx, func(rc restate.RunContext) (db.WindowCountsExpiredBatchRow, error) {
			return c.store.WindowCountsExpiredBatch(rc, db.WindowCountsExpiredBatchParams{Cutoff: uint64(now), Limit: c.batchSize})
		}, restate.WithName(fmt.Sprintf("count batch %d", batches+1)))
		if err != nil {
			return err
		}
		if b.RowsInBatch == 0 {
			break
		}
		if _, err := restate.Run(ctx, func(rc restate.RunContext) (int64, error) {
			return c.store.WindowCountsDeleteBatch(rc, db.WindowCountsDeleteBatchParams{LastPk: uint64(b.LastPk), Cutoff: uint64(now)})
		}, restate.WithName(fmt.Sprintf("delete batch %d", batches+1))); err != nil {
			return err
		}
		batches++
		deleted += b.RowsInBatch
		if full = b.RowsInBatch >= int64(c.batchSize); !full {
			break
		}
	}
	tombstoneCutoff := uint64(max(now-overrides.TombstoneRetention.Milliseconds(), 0))
	purged, morePurges, purgeErr := c.purge(ctx, "override tombstones",
		func(rc restate.RunContext) (int64, uint64, error) {
			b, err := c.store.OverridePurgeBatch(rc, db.OverridePurgeBatchParams{Cutoff: tombstoneCutoff, Limit: c.batchSize})
			return b.RowsInBatch, uint64(b.LastPk), err
		},
		func(rc restate.RunContext, lastPk uint64) (int64, error) {
			return c.store.OverridePurgeDeleted(rc, db.OverridePurgeDeletedParams{LastPk: lastPk, Cutoff: tombstoneCutoff})
		})
	if purgeErr != nil {
		return purgeErr
	}
	auditCutoff := uint64(max(now-c.auditRetention.Milliseconds(), 0))
	auditPurged, moreAudit, auditErr := c.purge(ctx, "audit entries",
		func(rc restate.RunContext) (int64, uint64, error) {
			b, err := c.store.AuditPurgeBatch(rc, db.AuditPurgeBatchParams{Cutoff: auditCutoff, Limit: c.batchSize})
			return b.RowsInBatch, uint64(b.LastPk), err
		},
		func(rc restate.RunContext, lastPk uint64) (int64, error) {
			return c.store.AuditPurge(rc, db.AuditPurgeParams{LastPk: lastPk, Cutoff: auditCutoff})
		})
	if auditErr != nil {
		return auditErr
	}
	settleCutoff := uint64(now)
	settlementsPurged, moreSettlements, settleErr := c.purge(ctx, "settlements",
		func(rc restate.RunContext) (int64, uint64, error) {
			b, err := c.store.SettlementsPurgeBatch(rc, db.SettlementsPurgeBatchParams{Cutoff: settleCutoff, Limit: c.batchSize})
			return b.RowsInBatch, uint64(b.LastPk), err
		},
		func(rc restate.RunContext, lastPk uint64) (int64, error) {
			return c.store.SettlementsPurge(rc, db.SettlementsPurgeParams{LastPk: lastPk, Cutoff: settleCutoff})
		})
	if settleErr != nil {
		return settleErr
	}
	if err := c.rollUp(ctx, now); err != nil {
		return err
	}
	analyticsPurged, moreAnalytics, analyticsErr := c.purgeAnalytics(ctx, now)
	if analyticsErr != nil {
		return analyticsErr
	}
	full = full || morePurges || moreAudit || moreSettlements || moreAnalytics
	delay := time.Duration(st.IntervalSeconds) * time.Second
	if full {
		delay = backlogDelay // more rows are waiting
	}
	st.Runs++
	st.LastRun = time.UnixMilli(now).UTC()
	st.LastRunDeleted = deleted
	st.LastRunBatches = batches
	st.TotalDeleted += deleted
	st.LastRunPurged = purged
	st.TotalPurged += purged
	st.LastRunAuditPurged = auditPurged
	st.TotalAuditPurged += auditPurged
	st.LastRunSettlementsPurged = settlementsPurged
	st.TotalSettlementsPurged += settlementsPurged
	st.LastRunAnalyticsPurged = analyticsPurged
	st.TotalAnalyticsPurged += analyticsPurged
	st.NextRun = st.LastRun.Add(delay)
	restate.Set(ctx, stateStatus, st)
	schedule(ctx, chain, delay)
	return nil
}

// Analytics roll-ups: each run recomputes, from the finer buckets, the
// hours and days that ended a while ago (late flushes have landed) and
// recently (the minutes and hours they are made of are still kept), so a
// run missed, or one that saw a late flush, is made good by the next.
const (
	hourSettle      = 5 * time.Minute // an hour is rolled up this long after it ended
	hoursRecomputed = 3
	daySettle       = time.Hour
	daysRecomputed  = 2
	// topPerBucket is how many identifiers of a namespace an hour or a
	// day keeps.
	topPerBucket = 100
)

// rollUp rolls minutes up into hours and hours into days, each bucket in
// durable steps that write the same however often they run.
func (c *Cleanup) rollUp(ctx restate.ObjectContext, now int64) error {
	type level struct {
		coarse, fine analytics.Granularity
		settle       time.Duration
		count        int
	}
	for _, l := range []level{{analytics.Hour, analytics.Minute, hourSettle, hoursRecomputed},
		{analytics.Day, analytics.Hour, daySettle, daysRecomputed}} {
		size := l.coarse.Duration().Milliseconds()
		last := (now-l.settle.Milliseconds())/size*size - size // the latest bucket that ended settle ago
		for i := range l.count {
			bucket := last - int64(i)*size
			coarse, fine := uint8(l.coarse), uint8(l.fine)
			if _, err := restate.Run(ctx, func(rc restate.RunContext) (restate.Void, error) {
				return restate.Void{}, c.store.AnalyticsRollup(rc, db.AnalyticsRollupParams{Coarse: coarse, Bucket: bucket,
					Fine: fine, BucketEnd: bucket + size})
			}, restate.WithName(fmt.Sprintf("roll up the %s of %d", l.coarse, bucket))); err != nil {
				return err
			}
			if _, err := restate.Run(ctx, func(rc restate.RunContext) (restate.Void, error) {
				if err := c.store.AnalyticsTopClear(rc, db.AnalyticsTopClearParams{Granularity: coarse, Bucket: bucket}); err != nil {
					return restate.Void{}, err
				}
				return restate.Void{}, c.store.AnalyticsTopRollup(rc, coarse, fine, bucket, bucket+size, topPerBucket)
			}, restate.WithName(fmt.Sprintf("roll up the identifiers of the %s of %d", l.coarse, bucket))); err != nil {
				return err
			}
		}
	}
	return nil
}

// purgeAnalytics deletes the analytics rows past their retention (see
// package analytics) and the roll call of processes not seen for a day,
// up to maxBatches batches of each, and reports the rows deleted and
// whether more are waiting.
func (c *Cleanup) purgeAnalytics(ctx restate.ObjectContext, now int64) (int64, bool, error) {
	var purged int64
	more := false
	for _, r := range []struct {
		g         analytics.Granularity
		retention time.Duration
	}{{analytics.Minute, analytics.MinuteRetention}, {analytics.Hour, analytics.HourRetention}, {analytics.Day, analytics.DayRetention}} {
		cutoff, g := now-r.retention.Milliseconds(), uint8(r.g)
		for _, table := range []string{"buckets", "identifiers"} {
			for i := 1; ; i++ {
				if i > c.maxBatches {
					more = true
					break
				}
				n, err := restate.Run(ctx, func(rc restate.RunContext) (int64, error) {
					if table == "buckets" {
						return c.store.AnalyticsPurge(rc, db.AnalyticsPurgeParams{Granularity: g, Cutoff: cutoff, Limit: c.batchSize})
					}
					return c.store.AnalyticsTopPurge(rc, db.AnalyticsTopPurgeParams{Granularity: g, Cutoff: cutoff, Limit: c.batchSize})
				}, restate.WithName(fmt.Sprintf("purge %s %s %d", r.g, table, i)))
				if err != nil {
					return purged, false, err
				}
				purged += n
				if n < int64(c.batchSize) {
					break
				}
			}
		}
	}
	if _, err := restate.Run(ctx, func(rc restate.RunContext) (int64, error) {
		return c.store.ProcessesPurge(rc, uint64(max(now-processRetention.Milliseconds(), 0)))
	}, restate.WithName("purge the roll call")); err != nil {
		return purged, false, err
	}
	return purged, more, nil
}

// processRetention is how long the roll call keeps a process not seen.
const processRetention = 24 * time.Hour

// purge removes rows in up to maxBatches batches, each counted in one
// durable step (count returns the batch's rows and last primary key) and
// deleted in the next (del deletes up to that key), so that a batch deleted
// again after a crash is counted once. It reports the rows removed and
// whether more are waiting.
func (c *Cleanup) purge(ctx restate.ObjectContext, what string,
	count func(restate.RunContext) (rows int64, lastPk uint64, err error),
	del func(rc restate.RunContext, lastPk uint64) (int64, error)) (int64, bool, error) {
	// The names of the rows sqlc generates, which runs journaled before
	// this helper existed hold.
	type batch struct {
		Rows   int64  `json:"RowsInBatch"`
		LastPk uint64 `json:"LastPk"`
	}
	var purged int64
	for i := 1; i <= c.maxBatches; i++ {
		b, err := restate.Run(ctx, func(rc restate.RunContext) (batch, error) {
			rows, last, err := count(rc)
			return batch{rows, last}, err
		}, restate.WithName(fmt.Sprintf("count %s %d", what, i)))
		if err != nil {
			return purged, false, err
		}
		if b.Rows == 0 {
			return purged, false, nil
		}
		if _, err := restate.Run(ctx, func(rc restate.RunContext) (int64, error) { return del(rc, b.LastPk) },
			restate.WithName(fmt.Sprintf("purge %s %d", what, i))); err != nil {
			return purged, false, err
		}
		purged += b.Rows
		if b.Rows < int64(c.batchSize) {
			return purged, false, nil
		}
	}
	return purged, true, nil // more are waiting
}

// schedule sends the chain's next run to this key after delay and records
// its invocation, so that Start and Stop can cancel it.
func schedule(ctx restate.ObjectContext, chain string, delay time.Duration) {
	inv := restate.ObjectSend(ctx, ServiceName, restate.Key(ctx), "Run").Send(RunRequest{Chain: chain}, restate.WithDelay(delay))
	restate.Set(ctx, statePending, inv.GetInvocationId())
}

// cancelPending cancels the scheduled run, if any. Cancelling one that
// already ran or started is harmless: a running Run holds the object, so
// Start and Stop only run between runs.
func cancelPending(ctx restate.ObjectContext) error {
	id, err := restate.Get[string](ctx, statePending)
	if err != nil {
		return err
	}
	if id != "" {
		restate.CancelInvocation(ctx, id)
		restate.Clear(ctx, statePending)
	}
	return nil
}

// Status returns the schedule's status, and whether it is running (see
// Status.Running). It is a shared handler: it answers while a run is in
// progress, or retried.
func (c *Cleanup) Status(ctx restate.ObjectSharedContext) (Status, error) {
	st, err := restate.Get[Status](ctx, stateStatus)
	if err != nil {
		return Status{}, err
	}
	if !st.Scheduled || st.NextRun.IsZero() {
		return st, nil
	}
	now, nowErr := nowMs(ctx)
	if nowErr != nil {
		return Status{}, nowErr
	}
	overdue := time.UnixMilli(now).Sub(st.NextRun)
	st.OverdueSeconds = int64(max(overdue, 0) / time.Second)
	st.Running = overdue <= 2*time.Duration(st.IntervalSeconds)*time.Second+overdueGrace
	return st, nil
}

// overdueGrace is how late a run may start, beyond twice the interval,
// before Status reports the chain as not running: a run that deletes a
// backlog, or restate-server's retry after a worker's restart, takes
// seconds.
const overdueGrace = 10 * time.Second

// nowMs reads the worker's clock as a durable step, so that a replayed
// Start or Status sees the time its first attempt saw. Run's cutoff is the
// database's clock instead.
func nowMs(ctx restate.Context) (int64, error) {
	now, err := restate.Run(ctx, func(restate.RunContext) (int64, error) { return time.Now().UnixMilli(), nil },
		restate.WithName("now"))
	if err != nil {
		return 0, err
	}
	return now, nil
}

// Package blocklistdrain retires the legacy ratelimit_blocklist table as a
// Restate workflow, in stages that are each durable and retryable:
//
//  1. verify: nothing has written the table since the new path took over;
//  2. wait-for-expiry: sleep durably until the last row's expiry has passed
//     (in slices of at most the recheck interval, to notice changes);
//  3. delete: delete the expired rows in batches, until the table is empty;
//  4. await-approval: wait for an operator's approval, a durable promise
//     resolved by one call to Approve;
//  5. drop: drop the table.
//
// The workflow refuses to go past a stage whose condition does not hold: it
// says why in its status, waits, and checks again. Status answers at any time.
package blocklistdrain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	restate "github.com/restatedev/sdk-go"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/durable"
)

// ServiceName is the Restate service name of the workflow.
const ServiceName = "BlocklistDrain"

// Stages, as Status reports them.
const (
	StageVerify        = "verify"
	StageWaitForExpiry = "wait-for-expiry"
	StageDelete        = "delete"
	StageAwaitApproval = "await-approval"
	StageDrop          = "drop"
	StageDone          = "done"
)

// Defaults of a run.
const (
	DefaultBatchSize = 1000
	// DefaultRecheck is how long the workflow waits before checking a
	// condition that did not hold again.
	DefaultRecheck = time.Minute
	// maxRecheck bounds recheckSeconds: a day between looks is already
	// longer than an operator would wait to see a stage move.
	maxRecheck = 24 * time.Hour
)

// Store is what the workflow needs of the database: db.Queries has it.
type Store interface {
	BlocklistStats(ctx context.Context) (db.BlocklistStatsRow, error)
	BlocklistExpiredBatch(ctx context.Context, arg db.BlocklistExpiredBatchParams) (db.BlocklistExpiredBatchRow, error)
	BlocklistDeleteBatch(ctx context.Context, arg db.BlocklistDeleteBatchParams) (int64, error)
	WindowCountsNow(ctx context.Context) (int64, error)
	BlocklistDropTable(ctx context.Context) error
}

// Drain is the Restate workflow. Bind it with restate.Reflect.
type Drain struct {
	store Store
}

// New returns the workflow on store.
func New(store Store) *Drain { return &Drain{store: store} }

// ServiceName names the workflow for Restate.
func (*Drain) ServiceName() string { return ServiceName }

// Definition returns the workflow on store, with the invocation retry
// policy that keeps a run alive through any outage (durable.RetryForever),
// for binding to a Restate endpoint.
func Definition(store Store) restate.ServiceDefinition {
	return restate.Reflect(New(store), durable.RetryForever())
}

// Input configures a run.
type Input struct {
	// CutoverAt is when the new window-counts path took over, in unix ms:
	// no row may have been created after it. 0 means the moment the
	// workflow starts.
	CutoverAt int64 `json:"cutoverAt,omitempty"`
	// BatchSize rows per DELETE; 0 means 1,000.
	BatchSize int32 `json:"batchSize,omitempty"`
	// RecheckSeconds between checks of a condition that did not hold; 0
	// means 60.
	RecheckSeconds int64 `json:"recheckSeconds,omitempty"`
}

// Approval is an operator's go-ahead to drop the table.
type Approval struct {
	By string `json:"by"`
}

// Status is where the workflow stands.
type Status struct {
	Stage string `json:"stage"`
	// Detail says what the stage is doing, or why it cannot go on.
	Detail       string    `json:"detail"`
	WaitingUntil time.Time `json:"waitingUntil,omitzero"`
	RowsDeleted  int64     `json:"rowsDeleted"`
	ApprovedBy   string    `json:"approvedBy,omitempty"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

const (
	stateStatus     = "status"
	promiseApproval = "approval"
)

// Run walks the stages. Every database call is a durable step, every wait a
// durable sleep or promise: a worker or restate-server restart resumes where
// the run was.
func (d *Drain) Run(ctx restate.WorkflowContext, in Input) (Status, error) {
	if in.BatchSize < 0 {
		return Status{}, restate.TerminalErrorf("batchSize: must be 0 (the default, %d) or more", DefaultBatchSize)
	}
	// Checked in seconds before converting: a large count would overflow
	// time.Duration.
	if in.RecheckSeconds < 0 || in.RecheckSeconds > int64(maxRecheck/time.Second) {
		return Status{}, restate.TerminalErrorf("recheckSeconds: must be between 0 (the default, %d) and %d",
			int64(DefaultRecheck/time.Second), int64(maxRecheck/time.Second))
	}
	batch := in.BatchSize
	if batch == 0 {
		batch = DefaultBatchSize
	}
	recheck := time.Duration(in.RecheckSeconds) * time.Second
	if recheck == 0 {
		recheck = DefaultRecheck
	}
	st := Status{}
	cutover := in.CutoverAt
	if cutover == 0 {
		now, err := d.now(ctx)
		if err != nil {
			return st, err
		}
		cutover = now
	}

	// 1. Nothing wrote the table after the cutover.
	for {
		stats, err := d.stats(ctx)
		if err != nil {
			return st, err
		}
		if stats.LatestCreatedAt <= cutover {
			break
		}
		if err := d.wait(ctx, &st, StageVerify, recheck, fmt.Sprintf(
			"a row was created at %s, after the cutover at %s: something still writes ratelimit_blocklist; checking again",
			ms(stats.LatestCreatedAt), ms(cutover))); err != nil {
			return st, err
		}
	}

	for {
		// 2. Every row has expired.
		for {
			stats, err := d.stats(ctx)
			if err != nil {
				return st, err
			}
			now, err := d.now(ctx)
			if err != nil {
				return st, err
			}
			if stats.LatestExpiresAt < now {
				break
			}
			// Sleep until the last expiry, looking again at least every
			// recheck, so that rows deleted or changed meanwhile are seen.
			// The gap is compared in ms before converting: an expiry far in
			// the future would overflow time.Duration and go negative.
			until := recheck
			if left := stats.LatestExpiresAt - now + 1; left < recheck.Milliseconds() {
				until = time.Duration(left) * time.Millisecond
			}
			if err := d.wait(ctx, &st, StageWaitForExpiry, until, fmt.Sprintf(
				"%d rows left; the last expires at %s", stats.RowCount, ms(stats.LatestExpiresAt))); err != nil {
				return st, err
			}
		}

		// 3. Delete them in batches.
		d.set(ctx, &st, StageDelete, "deleting expired rows", time.Time{})
		now, err := d.now(ctx)
		if err != nil {
			return st, err
		}
		// Each batch is counted in one durable step and deleted in the
		// next: a batch deleted again after a crash is counted once.
		for i := 1; ; i++ {
			b, err := restate.Run(ctx, func(rc restate.RunContext) (db.BlocklistExpiredBatchRow, error) {
				return d.store.BlocklistExpiredBatch(rc, db.BlocklistExpiredBatchParams{Cutoff: uint64(now), Limit: batch})
			}, restate.WithName(fmt.Sprintf("count batch %d", i)))
			if err != nil {
				return st, err
			}
			if b.RowsInBatch == 0 {
				break
			}
			if _, err := restate.Run(ctx, func(rc restate.RunContext) (int64, error) {
				return d.store.BlocklistDeleteBatch(rc, db.BlocklistDeleteBatchParams{LastPk: uint64(b.LastPk), Cutoff: uint64(now)})
			}, restate.WithName(fmt.Sprintf("delete batch %d", i))); err != nil {
				return st, err
			}
			st.RowsDeleted += b.RowsInBatch
			d.set(ctx, &st, StageDelete, fmt.Sprintf("deleted %d rows in %d batches", st.RowsDeleted, i), time.Time{})
			if b.RowsInBatch < int64(batch) {
				break
			}
		}
		stats, err := d.stats(ctx)
		if err != nil {
			return st, err
		}
		if stats.RowCount == 0 {
			break
		}
		// Rows appeared that have not expired: back to waiting.
		d.set(ctx, &st, StageWaitForExpiry, fmt.Sprintf("%d unexpired rows appeared while deleting", stats.RowCount), time.Time{})
	}

	// 4. An operator approves the drop.
	d.set(ctx, &st, StageAwaitApproval, "the table is empty; waiting for approval to drop it (call Approve)", time.Time{})
	approval, err := restate.Promise[Approval](ctx, promiseApproval).Result()
	if err != nil {
		return st, err
	}
	st.ApprovedBy = approval.By

	// 5. Drop it, unless rows came back.
	for {
		d.set(ctx, &st, StageDrop, "dropping ratelimit_blocklist", time.Time{})
		dropped, err := restate.Run(ctx, func(rc restate.RunContext) (string, error) {
			stats, err := d.store.BlocklistStats(rc)
			if isNoSuchTable(err) {
				return "", nil // dropped by an earlier attempt of this step
			}
			if err != nil {
				return "", err
			}
			if stats.RowCount > 0 {
				return fmt.Sprintf("%d rows appeared after approval; not dropping", stats.RowCount), nil
			}
			return "", d.store.BlocklistDropTable(rc)
		}, restate.WithName("drop table"))
		if err != nil {
			return st, err
		}
		if dropped == "" {
			break
		}
		if err := d.wait(ctx, &st, StageDrop, recheck, dropped); err != nil {
			return st, err
		}
	}
	d.set(ctx, &st, StageDone, "ratelimit_blocklist is dropped", time.Time{})
	return st, nil
}

// Approve resolves the approval promise. Approving before the workflow
// reaches the approval stage is kept: the workflow then drops the table as
// soon as it is empty.
func (d *Drain) Approve(ctx restate.WorkflowSharedContext, a Approval) (Status, error) {
	if a.By == "" {
		return Status{}, restate.TerminalErrorf("by: must name who approves")
	}
	if err := restate.Promise[Approval](ctx, promiseApproval).Resolve(a); err != nil {
		return Status{}, err
	}
	return restate.Get[Status](ctx, stateStatus)
}

// Status returns the current stage at any time.
func (d *Drain) Status(ctx restate.WorkflowSharedContext) (Status, error) {
	return restate.Get[Status](ctx, stateStatus)
}

// set records the stage.
func (d *Drain) set(ctx restate.WorkflowContext, st *Status, stage, detail string, until time.Time) {
	now, err := d.now(ctx)
	if err == nil {
		st.UpdatedAt = time.UnixMilli(now).UTC()
	}
	st.Stage, st.Detail, st.WaitingUntil = stage, detail, until
	restate.Set(ctx, stateStatus, *st)
}

// wait records why the stage cannot go on and sleeps durably for d.
func (d *Drain) wait(ctx restate.WorkflowContext, st *Status, stage string, dur time.Duration, why string) error {
	now, err := d.now(ctx)
	if err != nil {
		return err
	}
	d.set(ctx, st, stage, why, time.UnixMilli(now).Add(dur).UTC())
	if err := restate.Sleep(ctx, dur); err != nil {
		return err
	}
	return nil
}

func (d *Drain) stats(ctx restate.WorkflowContext) (db.BlocklistStatsRow, error) {
	s, err := restate.Run(ctx, func(rc restate.RunContext) (db.BlocklistStatsRow, error) {
		return d.store.BlocklistStats(rc)
	}, restate.WithName("table stats"))
	if err != nil {
		return s, err
	}
	return s, nil
}

// now reads the database's clock, one clock whichever worker runs the
// drain, as a durable step: a replayed run compares with the same time.
func (d *Drain) now(ctx restate.WorkflowContext) (int64, error) {
	now, err := restate.Run(ctx, func(rc restate.RunContext) (int64, error) { return d.store.WindowCountsNow(rc) },
		restate.WithName("the database's clock"))
	if err != nil {
		return 0, err
	}
	return now, nil
}

// isNoSuchTable reports whether err is MySQL's "table doesn't exist" (1146).
func isNoSuchTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}

// ms formats a unix ms time for a status message.
func ms(t int64) string { return time.UnixMilli(t).UTC().Format(time.RFC3339) }

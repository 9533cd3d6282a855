package cleanup

import (
	"fmt"
	"time"

	restate "github.com/restatedev/sdk-go"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/overrides"
)

// deleteExpiredCounts deletes the window counts that expired before now
// (their sequence two windows past), up to maxBatches batches, each counted
// in one durable step and deleted in the next. It reports the rows deleted,
// the batches, and whether the last batch was full (more may be waiting).
func (c *Cleanup) deleteExpiredCounts(ctx restate.ObjectContext, now int64) (deleted int64, batches int, full bool, err error) {
	for batches < c.maxBatches {
		b, err := restate.Run(ctx, func(rc restate.RunContext) (db.WindowCountsExpiredBatchRow, error) {
			return c.store.WindowCountsExpiredBatch(rc, db.WindowCountsExpiredBatchParams{Cutoff: uint64(now), Limit: c.batchSize})
		}, restate.WithName(fmt.Sprintf("count batch %d", batches+1)))
		if err != nil {
			return deleted, batches, false, err
		}
		if b.RowsInBatch == 0 {
			break
		}
		if _, err := restate.Run(ctx, func(rc restate.RunContext) (int64, error) {
			return c.store.WindowCountsDeleteBatch(rc, db.WindowCountsDeleteBatchParams{LastPk: uint64(b.LastPk), Cutoff: uint64(now)})
		}, restate.WithName(fmt.Sprintf("delete batch %d", batches+1))); err != nil {
			return deleted, batches, false, err
		}
		batches++
		deleted += b.RowsInBatch
		if full = b.RowsInBatch >= int64(c.batchSize); !full {
			break
		}
	}
	return deleted, batches, full, nil
}

// purgeOf is one purge a run makes: what it deletes (the name of its
// durable steps), how a batch is counted and deleted (see purge), and
// where its count goes in the schedule's status.
type purgeOf struct {
	what   string
	count  func(restate.RunContext) (rows int64, lastPk uint64, err error)
	remove func(rc restate.RunContext, lastPk uint64) (int64, error)
	record func(st *Status, n int64)
}

// purges are the purges of a run at now, in the order the run makes them
// (the journal's order: a purge added here would reorder the steps of runs
// in flight; a new one goes at the end of Run instead), each by the
// retention of the domain that owns the rows: the override
// tombstones after overrides.TombstoneRetention, the audit entries after
// the audit retention (audit.Retention unless WithAuditRetention), the
// records of settled reservations once their tokens have expired.
func (c *Cleanup) purges(now int64) []purgeOf {
	tombstones := uint64(max(now-overrides.TombstoneRetention.Milliseconds(), 0))
	audits := uint64(max(now-c.auditRetention.Milliseconds(), 0))
	settled := uint64(now)
	return []purgeOf{{
		what: "override tombstones",
		count: func(rc restate.RunContext) (int64, uint64, error) {
			b, err := c.store.OverridePurgeBatch(rc, db.OverridePurgeBatchParams{Cutoff: tombstones, Limit: c.batchSize})
			return b.RowsInBatch, uint64(b.LastPk), err
		},
		remove: func(rc restate.RunContext, lastPk uint64) (int64, error) {
			return c.store.OverridePurgeDeleted(rc, db.OverridePurgeDeletedParams{LastPk: lastPk, Cutoff: tombstones})
		},
		record: func(st *Status, n int64) { st.LastRunPurged, st.TotalPurged = n, st.TotalPurged+n },
	}, {
		what: "audit entries",
		count: func(rc restate.RunContext) (int64, uint64, error) {
			b, err := c.store.AuditPurgeBatch(rc, db.AuditPurgeBatchParams{Cutoff: audits, Limit: c.batchSize})
			return b.RowsInBatch, uint64(b.LastPk), err
		},
		remove: func(rc restate.RunContext, lastPk uint64) (int64, error) {
			return c.store.AuditPurge(rc, db.AuditPurgeParams{LastPk: lastPk, Cutoff: audits})
		},
		record: func(st *Status, n int64) { st.LastRunAuditPurged, st.TotalAuditPurged = n, st.TotalAuditPurged+n },
	}, {
		what: "settlements",
		count: func(rc restate.RunContext) (int64, uint64, error) {
			b, err := c.store.SettlementsPurgeBatch(rc, db.SettlementsPurgeBatchParams{Cutoff: settled, Limit: c.batchSize})
			return b.RowsInBatch, uint64(b.LastPk), err
		},
		remove: func(rc restate.RunContext, lastPk uint64) (int64, error) {
			return c.store.SettlementsPurge(rc, db.SettlementsPurgeParams{LastPk: lastPk, Cutoff: settled})
		},
		record: func(st *Status, n int64) {
			st.LastRunSettlementsPurged, st.TotalSettlementsPurged = n, st.TotalSettlementsPurged+n
		},
	}}
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
			n, full, err := c.purgeBatches(ctx, fmt.Sprintf("purge %s %s", r.g, table), func(rc restate.RunContext) (int64, error) {
				if table == "buckets" {
					return c.store.AnalyticsPurge(rc, db.AnalyticsPurgeParams{Granularity: g, Cutoff: cutoff, Limit: c.batchSize})
				}
				return c.store.AnalyticsTopPurge(rc, db.AnalyticsTopPurgeParams{Granularity: g, Cutoff: cutoff, Limit: c.batchSize})
			})
			purged += n
			if err != nil {
				return purged, false, err
			}
			more = more || full
		}
	}
	if _, err := restate.Run(ctx, func(rc restate.RunContext) (int64, error) {
		return c.store.ProcessesPurge(rc, uint64(max(now-analytics.ProcessRetention.Milliseconds(), 0)))
	}, restate.WithName("purge the roll call")); err != nil {
		return purged, false, err
	}
	return purged, more, nil
}

// purge removes rows in up to maxBatches batches, each counted in one
// durable step (count returns the batch's rows and last primary key) and
// deleted in the next (remove deletes up to that key), so that a batch deleted
// again after a crash is counted once. It reports the rows removed and
// whether more are waiting.
func (c *Cleanup) purge(ctx restate.ObjectContext, what string,
	count func(restate.RunContext) (rows int64, lastPk uint64, err error),
	remove func(rc restate.RunContext, lastPk uint64) (int64, error)) (int64, bool, error) {
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
		if _, err := restate.Run(ctx, func(rc restate.RunContext) (int64, error) { return remove(rc, b.LastPk) },
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

// purgePenalties deletes the penalty boxes that stopped mattering before
// now (a block's end plus its length: no offence can double it any more),
// up to maxBatches batches, and reports the rows deleted and whether more
// are waiting. Deleting a row twice deletes nothing: each batch is one
// step.
func (c *Cleanup) purgePenalties(ctx restate.ObjectContext, now int64) (int64, bool, error) {
	return c.purgeBatches(ctx, "purge penalties", func(rc restate.RunContext) (int64, error) {
		return c.store.PenaltiesPurge(rc, db.PenaltiesPurgeParams{ExpiresAt: uint64(max(now, 0)), Limit: c.batchSize})
	})
}

// purgeBatches deletes rows a batch at a time with remove, each batch a
// step named name and its number, until a batch is short or maxBatches
// ran, and reports the rows deleted and whether more are waiting.
func (c *Cleanup) purgeBatches(ctx restate.ObjectContext, name string, remove func(restate.RunContext) (int64, error)) (int64, bool, error) {
	var purged int64
	for i := 1; i <= c.maxBatches; i++ {
		n, err := restate.Run(ctx, remove, restate.WithName(fmt.Sprintf("%s %d", name, i)))
		if err != nil {
			return purged, false, err
		}
		purged += n
		if n < int64(c.batchSize) {
			return purged, false, nil
		}
	}
	return purged, true, nil
}

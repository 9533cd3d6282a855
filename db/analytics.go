package db

import (
	"context"
	"strings"
)

// Statements of the analytics tables that sqlc cannot generate for MySQL:
// multi-row upserts (of the tables' models, without their primary key),
// and an INSERT … SELECT from a ranked derived table.

// AnalyticsBulkMaxRows is the most rows one bulk add may carry: 8
// placeholders a row stay below MySQL's limit of 65,535 a statement.
const AnalyticsBulkMaxRows = 5000

// AnalyticsAddBuckets adds rows' counts to the buckets the table holds,
// creating those it does not. Callers sort rows in unique-key order, so that
// concurrent adds lock rows in one order.
func (q *Queries) AnalyticsAddBuckets(ctx context.Context, rows []RatelimitAnalytic) error {
	args := make([]any, 0, 7*len(rows))
	for _, r := range rows {
		args = append(args, r.WorkspaceID, r.Namespace, r.Granularity, r.Bucket, r.Passed, r.Denied, r.ShadowDenied)
	}
	return q.analyticsAdd(ctx, "ratelimit_analytics (workspace_id, namespace, granularity, bucket, passed, denied, shadow_denied)", 7, args)
}

// AnalyticsAddTop adds rows' counts to the named identifiers the table
// holds, creating those it does not; sorted as AnalyticsAddBuckets's.
func (q *Queries) AnalyticsAddTop(ctx context.Context, rows []RatelimitAnalyticsTop) error {
	args := make([]any, 0, 8*len(rows))
	for _, r := range rows {
		args = append(args, r.WorkspaceID, r.Namespace, r.Granularity, r.Bucket, r.Identifier, r.Passed, r.Denied, r.ShadowDenied)
	}
	return q.analyticsAdd(ctx, "ratelimit_analytics_top (workspace_id, namespace, granularity, bucket, identifier, passed, denied, shadow_denied)", 8, args)
}

// analyticsAdd inserts args, width values a row, into table (with its
// columns), adding passed, denied and shadow_denied to the rows that exist.
func (q *Queries) analyticsAdd(ctx context.Context, table string, width int, args []any) error {
	if len(args) == 0 {
		return nil
	}
	tuple := "(?" + strings.Repeat(", ?", width-1) + ")"
	var b strings.Builder
	b.WriteString("INSERT INTO " + table + " VALUES ")
	for i := 0; i < len(args)/width; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tuple)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE passed = passed + VALUES(passed), denied = denied + VALUES(denied), " +
		"shadow_denied = shadow_denied + VALUES(shadow_denied)")
	_, err := q.db.ExecContext(ctx, b.String(), args...)
	return err
}

// analyticsTopRollup writes the named identifiers of the coarse bucket that
// starts at bucket: per namespace, the maxRows most denied (then most
// shadow-denied, then busiest) identifiers of the finer buckets in
// [bucket, bucketEnd), summed.
const analyticsTopRollup = `INSERT INTO ratelimit_analytics_top (workspace_id, namespace, granularity, bucket, identifier, passed, denied, shadow_denied)
SELECT ranked.workspace_id, ranked.namespace, ?, ?, ranked.identifier, ranked.p, ranked.d, ranked.s
FROM (
    SELECT src.workspace_id, src.namespace, src.identifier, SUM(src.passed) AS p, SUM(src.denied) AS d, SUM(src.shadow_denied) AS s,
        ROW_NUMBER() OVER (PARTITION BY src.workspace_id, src.namespace
            ORDER BY SUM(src.denied) DESC, SUM(src.shadow_denied) DESC, SUM(src.passed) DESC, src.identifier) AS rn
    FROM ratelimit_analytics_top src
    WHERE src.granularity = ? AND src.bucket >= ? AND src.bucket < ?
    GROUP BY src.workspace_id, src.namespace, src.identifier
) ranked
WHERE ranked.rn <= ?
ON DUPLICATE KEY UPDATE passed = VALUES(passed), denied = VALUES(denied), shadow_denied = VALUES(shadow_denied)`

// AnalyticsTopRollup runs analyticsTopRollup. Run after AnalyticsTopClear of
// the same bucket, it writes the same however often it runs.
func (q *Queries) AnalyticsTopRollup(ctx context.Context, coarse, fine uint8, bucket, bucketEnd int64, maxRows int) error {
	_, err := q.db.ExecContext(ctx, analyticsTopRollup, coarse, bucket, fine, bucket, bucketEnd, maxRows)
	return err
}

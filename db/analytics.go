package db

import (
	"context"
	"strings"
)

// Statements of the analytics tables that sqlc cannot generate for MySQL:
// multi-row upserts, and an INSERT … SELECT from a ranked derived table.

// AnalyticsBucket is one namespace's counts in one bucket, as a process
// adds them.
type AnalyticsBucket struct {
	WorkspaceID string
	Namespace   string
	Granularity uint8
	Bucket      int64
	Passed      uint64
	Denied      uint64
}

// AnalyticsTopEntry is one named identifier's counts in one bucket.
type AnalyticsTopEntry struct {
	AnalyticsBucket
	Identifier string
}

// AnalyticsBulkMaxRows is the most rows one bulk add may carry: 7
// placeholders a row stay below MySQL's limit of 65,535 a statement.
const AnalyticsBulkMaxRows = 5000

// AnalyticsAddBuckets adds rows' counts to the buckets the table holds,
// creating those it does not. Callers sort rows in unique-key order, so that
// concurrent adds lock rows in one order.
func (q *Queries) AnalyticsAddBuckets(ctx context.Context, rows []AnalyticsBucket) error {
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("INSERT INTO ratelimit_analytics (workspace_id, namespace, granularity, bucket, passed, denied) VALUES ")
	args := make([]any, 0, 6*len(rows))
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?)")
		args = append(args, r.WorkspaceID, r.Namespace, r.Granularity, r.Bucket, r.Passed, r.Denied)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE passed = passed + VALUES(passed), denied = denied + VALUES(denied)")
	_, err := q.db.ExecContext(ctx, b.String(), args...)
	return err
}

// AnalyticsAddTop adds rows' counts to the named identifiers the table
// holds, creating those it does not; sorted as AnalyticsAddBuckets's.
func (q *Queries) AnalyticsAddTop(ctx context.Context, rows []AnalyticsTopEntry) error {
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("INSERT INTO ratelimit_analytics_top (workspace_id, namespace, granularity, bucket, identifier, passed, denied) VALUES ")
	args := make([]any, 0, 7*len(rows))
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?)")
		args = append(args, r.WorkspaceID, r.Namespace, r.Granularity, r.Bucket, r.Identifier, r.Passed, r.Denied)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE passed = passed + VALUES(passed), denied = denied + VALUES(denied)")
	_, err := q.db.ExecContext(ctx, b.String(), args...)
	return err
}

// analyticsTopRollup writes the named identifiers of the coarse bucket that
// starts at bucket: per namespace, the maxRows most denied (then busiest)
// identifiers of the finer buckets in [bucket, bucketEnd), summed.
const analyticsTopRollup = `INSERT INTO ratelimit_analytics_top (workspace_id, namespace, granularity, bucket, identifier, passed, denied)
SELECT ranked.workspace_id, ranked.namespace, ?, ?, ranked.identifier, ranked.p, ranked.d
FROM (
    SELECT src.workspace_id, src.namespace, src.identifier, SUM(src.passed) AS p, SUM(src.denied) AS d,
        ROW_NUMBER() OVER (PARTITION BY src.workspace_id, src.namespace
            ORDER BY SUM(src.denied) DESC, SUM(src.passed) DESC, src.identifier) AS rn
    FROM ratelimit_analytics_top src
    WHERE src.granularity = ? AND src.bucket >= ? AND src.bucket < ?
    GROUP BY src.workspace_id, src.namespace, src.identifier
) ranked
WHERE ranked.rn <= ?
ON DUPLICATE KEY UPDATE passed = VALUES(passed), denied = VALUES(denied)`

// AnalyticsTopRollup runs analyticsTopRollup. Run after AnalyticsTopClear of
// the same bucket, it writes the same however often it runs.
func (q *Queries) AnalyticsTopRollup(ctx context.Context, coarse, fine uint8, bucket, bucketEnd int64, maxRows int) error {
	_, err := q.db.ExecContext(ctx, analyticsTopRollup, coarse, bucket, fine, bucket, bucketEnd, maxRows)
	return err
}

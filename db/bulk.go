package db

import (
	"context"
	"strings"
)

// WindowCountsBulkUpsertMaxRows is the most rows one bulk upsert may carry:
// 10 placeholders a row stay below MySQL's limit of 65,535 placeholders per
// statement (6,553 rows) with room to spare.
const WindowCountsBulkUpsertMaxRows = 5000

// WindowCountsBulkUpsert is WindowCountsUpsert for many rows in one
// statement, which sqlc cannot generate for MySQL. Callers keep rows at most
// WindowCountsBulkUpsertMaxRows long and sorted in unique-key order, so that
// concurrent upserts take their row locks in the same order.
func (q *Queries) WindowCountsBulkUpsert(ctx context.Context, rows []WindowCountsUpsertParams) error {
	if len(rows) == 0 {
		return nil
	}
	_, err := q.db.ExecContext(ctx, windowCountsBulkUpsertSQL(len(rows)), windowCountsBulkUpsertArgs(rows)...)
	return err
}

// dbNowMs is the database's clock in unix ms, as the single-row upsert
// stamps updated_at.
const dbNowMs = "FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000)"

// windowCountsBulkUpsertSQL returns the statement for n rows: the single-row
// upsert's INSERT with n value tuples and the same GREATEST merge.
func windowCountsBulkUpsertSQL(n int) string {
	const tuple = "(?, ?, ?, ?, ?, ?, ?, ?, " + dbNowMs + ", ?, ?)"
	var b strings.Builder
	b.Grow(200 + n*(len(tuple)+2))
	b.WriteString("INSERT INTO ratelimit_window_counts (\n" +
		"    workspace_id, namespace, identifier, duration_ms, sequence, region, count, expires_at, updated_at, window_limit, refunded\n" +
		") VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tuple)
	}
	b.WriteString("\nON DUPLICATE KEY UPDATE\n" +
		"    count = GREATEST(count, VALUES(count)),\n" +
		"    expires_at = LEAST(expires_at, VALUES(expires_at)),\n" +
		"    refunded = GREATEST(refunded, VALUES(refunded)),\n" +
		"    updated_at = VALUES(updated_at),\n" +
		"    window_limit = IF(VALUES(window_limit) = 0, window_limit, VALUES(window_limit))")
	return b.String()
}

func windowCountsBulkUpsertArgs(rows []WindowCountsUpsertParams) []any {
	args := make([]any, 0, 10*len(rows))
	for _, r := range rows {
		args = append(args, r.WorkspaceID, r.Namespace, r.Identifier, r.DurationMs, r.Sequence,
			r.Region, r.Count, r.ExpiresAt, r.WindowLimit, r.Refunded)
	}
	return args
}

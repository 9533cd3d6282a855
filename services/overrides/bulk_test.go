package overrides

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
)

// insertOverrides writes n live overrides straight into the table, 5,000
// rows a statement, naming the i-th with name(i).
func insertOverrides(tb testing.TB, sqlDB *sql.DB, n int, name func(i int) (workspace, namespace, identifier string)) {
	tb.Helper()
	const perStatement = 5000
	for start := 0; start < n; start += perStatement {
		end := min(start+perStatement, n)
		var b strings.Builder
		b.WriteString("INSERT INTO ratelimit_overrides (id, workspace_id, namespace, identifier, limit_value, duration_ms, updated_at, deleted_at, revision) VALUES ")
		args := make([]any, 0, 4*(end-start))
		for i := start; i < end; i++ {
			if i > start {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, 10, 60000, 1, 0, 1)")
			ws, ns, id := name(i)
			args = append(args, fmt.Sprint("ovr_bulk", i), ws, ns, id)
		}
		if _, err := sqlDB.Exec(b.String(), args...); err != nil {
			tb.Fatalf("insert overrides %d to %d: %v", start, end, err)
		}
	}
}

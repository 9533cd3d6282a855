package mysqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/analytics/mysqlstore"
	"github.com/unkeyed/ratelimit/services/analytics/storetest"
)

// TestContract runs the contract suite on a real MariaDB.
func TestContract(t *testing.T) {
	t.Parallel()
	_, sqlDB := dbtest.Start(t)
	storetest.TestStore(t, mysqlstore.New(sqlDB, time.Now))
}

// TestFleet runs the roll call's suite on a real MariaDB, and a row an
// earlier version wrote is read with the default interval.
func TestMySQLFleet(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	m := mysqlstore.New(sqlDB, time.Now)
	storetest.TestFleet(t, m, m, func(id string, by time.Duration) {
		if _, err := sqlDB.Exec(`UPDATE ratelimit_processes SET seen_at = seen_at - ? WHERE process_id = ?`, by.Milliseconds(), id); err != nil {
			t.Fatal(err)
		}
	})
	// A row an earlier version wrote says no interval: the default's is
	// assumed.
	if _, err := sqlDB.Exec(`INSERT INTO ratelimit_processes (process_id, region, seen_at, last_sync_at, redis_nodes)
		VALUES ('old', 'us', FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) - 20000, 0, '{}')`); err != nil {
		t.Fatal(err)
	}
	got, now, err := m.Processes(context.Background(), time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != "old" || got[0].FlushInterval != 0 ||
		got[0].ReportInterval() != analytics.DefaultFlushInterval || !got[0].Live(now) {
		t.Fatalf("an earlier version's row 20 s after its report: %+v (%v), want it live, reporting every 10 s", got, err)
	}
}

package mysqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
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

// lostAnswers adds to its store, and reports the first adds failed as if
// their commit's answer had been lost (a deadline during the commit).
type lostAnswers struct {
	analytics.Store
	lose atomic.Int64 // how many more answers to lose
}

func (l *lostAnswers) Add(ctx context.Context, batch string, b []analytics.Bucket, e []analytics.Entry) error {
	if err := l.Store.Add(ctx, batch, b, e); err != nil {
		return err
	}
	if l.lose.Add(-1) >= 0 {
		return errors.New("commit: context deadline exceeded")
	}
	return nil
}

// TestFlushesAreAddedOnce: a flush whose commit's answer was lost is sent
// again and added once. Before, it was added twice: a flush that timed
// out on one tenant's identifier rows was resent whole, and another
// tenant's 507 decisions were reported as 1,670. Here 3,000 namespaces
// (6,002 rows: two batches) have their answers lost twice.
func TestFlushesAreAddedOnce(t *testing.T) {
	t.Parallel()
	_, sqlDB := dbtest.Start(t)
	store := &lostAnswers{Store: mysqlstore.New(sqlDB, time.Now)}
	store.lose.Store(2)
	r, err := analytics.NewRecorder(store, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
		analytics.WithFlushInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	for _, ws := range []string{"ws_a", "ws_c", "ws_d"} {
		for i := range 1000 {
			r.Record(ws, fmt.Sprint("ns_", i), "u", true)
		}
	}
	for range 507 {
		r.Record("ws_b", "api", "v", false)
	}
	poll.Until(t, 10*time.Second, "an answer after the two lost", func() bool { return store.lose.Load() < 0 })
	cancel()
	<-done
	from, to := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	series, err := store.Series(context.Background(), "ws_b", "api", analytics.Hour, from, to)
	if err != nil || len(series) != 1 || series[0].Denied != 507 {
		t.Fatalf("B's 507 decisions read as %+v (%v), want 507 once", series, err)
	}
	var total int64
	if err := sqlDB.QueryRow(`SELECT CAST(COALESCE(SUM(passed + denied), 0) AS SIGNED) FROM ratelimit_analytics`).Scan(&total); err != nil || total != 3507 {
		t.Fatalf("%d decisions in the table (%v), want 3,507", total, err)
	}
}

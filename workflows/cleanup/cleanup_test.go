package cleanup

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/restatedev/sdk-go/server"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// countingStore counts the DELETEs that reached the database.
type countingStore struct {
	*db.Queries
	calls atomic.Int64
	// block, when set, makes the call with that number wait for release
	// without touching the database, as a worker that dies there would;
	// after deleting, if afterDelete, as a worker that dies between the
	// database's commit and its answer would.
	block       int64
	afterDelete bool
	entered     chan struct{}
	release     chan struct{}
}

func (s *countingStore) WindowCountsDeleteBatch(ctx context.Context, arg db.WindowCountsDeleteBatchParams) (int64, error) {
	n := s.calls.Add(1)
	if n == s.block {
		if s.afterDelete {
			s.Queries.WindowCountsDeleteBatch(ctx, arg)
		}
		close(s.entered)
		<-s.release
		return 0, context.Canceled
	}
	return s.Queries.WindowCountsDeleteBatch(ctx, arg)
}

type env struct {
	sqlDB   *sql.DB
	restate *testserver.Restate
}

func setup(t *testing.T) *env {
	t.Helper()
	_, sqlDB := dbtest.Start(t)
	return &env{sqlDB: sqlDB, restate: testserver.StartRestate(t)}
}

func (e *env) endpoint(t *testing.T, store Store, opts ...Option) *testserver.Endpoint {
	t.Helper()
	h, err := server.NewRestate().WithLogger(slog.DiscardHandler, true).WithIdentityV1(e.restate.IdentityKey).Bind(Definition(store, opts...)).Handler()
	if err != nil {
		t.Fatal(err)
	}
	return testserver.ServeEndpoint(t, e.restate, h)
}

// insert adds rows that expire at expires (unix ms).
func (e *env) insert(t *testing.T, prefix string, n int, expires uint64) {
	t.Helper()
	q := db.New(e.sqlDB)
	for i := 0; i < n; i++ {
		err := q.WindowCountsUpsert(context.Background(), db.WindowCountsUpsertParams{WorkspaceID: "ws", Namespace: "ns",
			Identifier: prefix + string(rune('a'+i)), DurationMs: 1000, Sequence: 1, Region: "us", Count: 1, ExpiresAt: expires})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := e.sqlDB.QueryRow("SELECT COUNT(*) FROM ratelimit_window_counts WHERE " + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// column returns the one string column query selects, row by row.
func (e *env) column(t *testing.T, query string) []string {
	t.Helper()
	rows, err := e.sqlDB.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *env) status(t *testing.T, key string) Status {
	t.Helper()
	var st Status
	if err := e.restate.Call("/Cleanup/"+key+"/Status", "", &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (e *env) start(t *testing.T, key, body string) Status {
	t.Helper()
	out, err := e.restate.Post(e.restate.IngressURL+"/Cleanup/"+key+"/Start", body)
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	json.Unmarshal([]byte(out), &st)
	return st
}

var far = uint64(time.Now().Add(24 * time.Hour).UnixMilli())

func TestCleanupDeletesExpiredRowsInBoundedBatches(t *testing.T) {
	t.Parallel()
	e := setup(t)
	store := &countingStore{Queries: db.New(e.sqlDB)}
	e.endpoint(t, store, WithBatches(2, 3))
	e.insert(t, "old", 7, 1000)
	e.insert(t, "live", 3, far)
	if st := e.start(t, "t1", `{"intervalSeconds":2}`); !st.Scheduled || st.IntervalSeconds != 2 {
		t.Fatalf("Start = %+v, want a scheduled run every 2 s", st)
	}
	// Run 1 hits its bound (3 full batches of 2) and schedules run 2 at
	// once; run 2 deletes the last expired row.
	poll.Until(t, 20*time.Second, "the expired rows to go", func() bool { return e.status(t, "t1").TotalDeleted == 7 })
	st := e.status(t, "t1")
	if e.count(t, "expires_at = 1000") != 0 || e.count(t, "identifier LIKE 'live%'") != 3 {
		t.Fatalf("rows left: %d expired, %d live; want 0 and 3", e.count(t, "expires_at = 1000"), e.count(t, "identifier LIKE 'live%'"))
	}
	if st.Runs != 2 || st.LastRunBatches != 1 || st.LastRunDeleted != 1 {
		t.Fatalf("status %+v, want 2 runs, the last with 1 batch deleting 1 row", st)
	}
	if got := store.calls.Load(); got != 4 {
		t.Fatalf("%d DELETEs, want 4 (3 bounded by the run, 1 more)", got)
	}
	// It runs again after its interval.
	e.insert(t, "later", 2, 2000)
	poll.Until(t, 10*time.Second, "the next run", func() bool { return e.status(t, "t1").TotalDeleted == 9 })
	if st := e.status(t, "t1"); st.Runs < 3 || !st.NextRun.After(st.LastRun) {
		t.Fatalf("status %+v, want a third run and a next run after it", st)
	}
}

// pendingRuns lists Restate's own invocations of Run for key that have not
// completed.
func (e *env) pendingRuns(t *testing.T, key string) int {
	t.Helper()
	rows, err := e.restate.Query("SELECT id, status FROM sys_invocation WHERE target_service_name = 'Cleanup' AND target_service_key = '" +
		key + "' AND target_handler_name = 'Run' AND status != 'completed'")
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

func TestCleanupStartedTwiceIsOneChain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, db.New(e.sqlDB))
	first := e.start(t, "t2", `{"intervalSeconds":60}`)
	poll.Until(t, 10*time.Second, "the first run", func() bool { return e.status(t, "t2").Runs == 1 })
	second := e.start(t, "t2", `{}`)
	e.start(t, "t2", `{"intervalSeconds":30}`) // changes the interval of the same chain
	if !first.Scheduled || !second.Scheduled {
		t.Fatalf("Start answered %+v and %+v", first, second)
	}
	// The new interval replaced the pending run with one that ran at once;
	// the old one was cancelled, not left beside it.
	poll.Until(t, 10*time.Second, "the run the new interval started", func() bool { return e.status(t, "t2").Runs == 2 })
	time.Sleep(500 * time.Millisecond)
	if n := e.pendingRuns(t, "t2"); n != 1 {
		t.Fatalf("Restate holds %d pending runs of the schedule, want 1", n)
	}
	if st := e.status(t, "t2"); st.Runs != 2 || st.IntervalSeconds != 30 {
		t.Fatalf("status %+v, want 2 runs and the new interval", st)
	}
	// Stop ends the chain: its pending run does nothing when it fires.
	if out, err := e.restate.Post(e.restate.IngressURL+"/Cleanup/t2/Stop", ""); err != nil || !strings.Contains(out, `"scheduled":false`) {
		t.Fatalf("Stop = %s, %v", out, err)
	}
}

func TestCleanupSurvivesRestateRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, db.New(e.sqlDB))
	e.start(t, "t3", `{"intervalSeconds":1}`)
	poll.Until(t, 10*time.Second, "a run", func() bool { return e.status(t, "t3").Runs >= 1 })
	e.restate.Kill()
	e.restate.Start()
	e.insert(t, "old", 3, 1000)
	before := e.status(t, "t3").Runs
	poll.Until(t, 30*time.Second, "runs after the restart", func() bool {
		st := e.status(t, "t3")
		return st.Runs >= before+2 && st.TotalDeleted == 3
	})
	if n := e.pendingRuns(t, "t3"); n != 1 {
		t.Fatalf("%d pending runs after the restart, want 1", n)
	}
}

// TestCleanupWorkerKilledMidRun kills the worker inside the second batch of
// a run, before its DELETE reaches the database and, again, after it
// committed, and starts it again: the run resumes after its first batch,
// which is not executed again, every expired row is deleted exactly once,
// and the status counts each once (before: a batch deleted by the dead
// worker went uncounted).
func TestCleanupWorkerKilledMidRun(t *testing.T) {
	t.Parallel()
	for _, afterDelete := range []bool{false, true} {
		t.Run(fmt.Sprint("after the delete ", afterDelete), func(t *testing.T) { testKilledMidRun(t, afterDelete) })
	}
}

func testKilledMidRun(t *testing.T, afterDelete bool) {
	e := setup(t)
	e.insert(t, "old", 5, 1000)
	e.insert(t, "live", 2, far)
	first := &countingStore{Queries: db.New(e.sqlDB), block: 2, afterDelete: afterDelete, entered: make(chan struct{}), release: make(chan struct{})}
	var once sync.Once
	defer once.Do(func() { close(first.release) })
	ep := e.endpoint(t, first, WithBatches(2, 10))
	e.start(t, "t4", `{"intervalSeconds":3600}`)
	select {
	case <-first.entered:
	case <-time.After(poll.Scaled(20 * time.Second)):
		t.Fatal("the run never reached its second batch")
	}
	ep.Kill()
	once.Do(func() { close(first.release) }) // the dead worker never answers
	if got, want := e.count(t, "expires_at = 1000"), map[bool]int{false: 3, true: 1}[afterDelete]; got != want {
		t.Fatalf("%d expired rows left when the worker died, want %d", got, want)
	}
	second := &countingStore{Queries: db.New(e.sqlDB)}
	h, err := server.NewRestate().WithLogger(slog.DiscardHandler, true).WithIdentityV1(e.restate.IdentityKey).Bind(Definition(second, WithBatches(2, 10))).Handler()
	if err != nil {
		t.Fatal(err)
	}
	ep.SetHandler(h)
	ep.Start()
	poll.Until(t, 60*time.Second, "the run to complete", func() bool { return e.status(t, "t4").Runs == 1 })
	st := e.status(t, "t4")
	if st.TotalDeleted != 5 || st.LastRunBatches != 3 {
		t.Fatalf("status %+v, want 5 rows deleted in 3 batches", st)
	}
	if got := second.calls.Load(); got != 2 {
		t.Fatalf("the restarted worker ran %d DELETEs, want 2 (batch 1 came from the journal, batch 2 again)", got)
	}
	if e.count(t, "expires_at = 1000") != 0 || e.count(t, "identifier LIKE 'live%'") != 2 {
		t.Fatal("rows left over or live rows deleted")
	}
}

// TestCleanupRejectsOverflowingInterval refuses an interval whose seconds
// would overflow a duration (and once wrapped to 1.29 s), and keeps the
// schedule as it was.
func TestCleanupRejectsOverflowingInterval(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, db.New(e.sqlDB))
	e.start(t, "t5", `{"intervalSeconds":600}`)
	out, err := e.restate.Post(e.restate.IngressURL+"/Cleanup/t5/Start", `{"intervalSeconds":18446744075}`)
	if err == nil || !strings.Contains(err.Error()+out, "intervalSeconds: must be between 1 and 86400") {
		t.Fatalf("answer %q, %v; want intervalSeconds refused", out, err)
	}
	if st := e.status(t, "t5"); st.IntervalSeconds != 600 {
		t.Fatalf("interval after the refused change = %d, want 600", st.IntervalSeconds)
	}
}

// TestCleanupPurgesOverrideTombstones: a run removes the rows of overrides
// deleted more than a day ago by the database's clock, and keeps live
// overrides and recent tombstones, which processes' polls still read.
func TestCleanupPurgesOverrideTombstones(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, &countingStore{Queries: db.New(e.sqlDB)}, WithBatches(2, 3))
	now := time.Now().UnixMilli()
	for i, deletedAt := range []int64{0, now - time.Hour.Milliseconds(), now - 25*time.Hour.Milliseconds(),
		now - 48*time.Hour.Milliseconds(), now - 30*24*time.Hour.Milliseconds()} {
		if _, err := e.sqlDB.Exec(`INSERT INTO ratelimit_overrides (id, workspace_id, namespace, identifier, limit_value,
			duration_ms, updated_at, deleted_at, revision) VALUES (?, 'ws', 'ns', ?, 1, 1000, ?, ?, ?)`,
			fmt.Sprint("ovr_", i), fmt.Sprint("id", i), max(deletedAt, now), deletedAt, i+1); err != nil {
			t.Fatal(err)
		}
	}
	e.start(t, "purge", "{}")
	poll.Until(t, 20*time.Second, "the old tombstones to go", func() bool { return e.status(t, "purge").TotalPurged == 3 })
	left := e.column(t, "SELECT identifier FROM ratelimit_overrides ORDER BY identifier")
	if want := []string{"id0", "id1"}; !slices.Equal(left, want) {
		t.Fatalf("rows left %v, want %v (the live override and the tombstone of an hour ago)", left, want)
	}
}

// TestCleanupSurvivesAnOutageLongerThanTheRetryBudget: restate-server's
// default retry budget is shrunk to 4 attempts, 2 s apart at most, and the
// worker is down for 15 s while a run is due. The schedule's own retry
// policy keeps the run backing off instead of pausing it, and once the
// worker is back the run deletes the rows that expired meanwhile (before:
// the run was paused for good, and 500 of 500 expired rows were still there
// 60 s after the worker returned).
func TestCleanupSurvivesAnOutageLongerThanTheRetryBudget(t *testing.T) {
	t.Parallel()
	_, sqlDB := dbtest.Start(t)
	e := &env{sqlDB: sqlDB, restate: testserver.StartRestate(t,
		"RESTATE_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS=4", "RESTATE_DEFAULT_RETRY_POLICY__MAX_INTERVAL=2s")}
	ep := e.endpoint(t, db.New(e.sqlDB), WithBatches(100, 10))
	e.start(t, "outage", `{"intervalSeconds":1}`)
	poll.Until(t, 20*time.Second, "the first run", func() bool { return e.status(t, "outage").Runs >= 1 })
	ep.Kill()
	e.insert(t, "old", 50, 1000)
	time.Sleep(15 * time.Second) // several times the server's retry budget
	rows, err := e.restate.Query("SELECT status FROM sys_invocation WHERE target_service_name = 'Cleanup' AND target_handler_name = 'Run' AND status != 'completed'")
	if err != nil || len(rows) != 1 || rows[0]["status"] == "paused" {
		t.Fatalf("the pending run after 15 s without a worker: %v (%v), want one, not paused", rows, err)
	}
	ep.Start()
	poll.Until(t, 30*time.Second, "the rows that expired during the outage to be deleted", func() bool { return e.count(t, "expires_at = 1000") == 0 })
	poll.Until(t, 10*time.Second, "the schedule to report running", func() bool {
		st := e.status(t, "outage")
		return st.Running && st.TotalDeleted == 50
	})
}

// TestStatusReportsAStalledSchedule: with the database unreachable, runs
// fail and are retried, and Status (served meanwhile) reports the schedule
// as not running once its next run is overdue; once the database is back
// it runs again.
func TestStatusReportsAStalledSchedule(t *testing.T) {
	t.Parallel()
	e := setup(t)
	broken := &failingStore{Queries: db.New(e.sqlDB)}
	e.endpoint(t, broken, WithBatches(100, 10))
	e.start(t, "stall", `{"intervalSeconds":1}`)
	poll.Until(t, 20*time.Second, "the first run", func() bool { return e.status(t, "stall").Runs >= 1 })
	broken.down.Store(true)
	poll.Until(t, 30*time.Second, "Status to report the schedule as not running", func() bool {
		st := e.status(t, "stall")
		return !st.Running && st.Scheduled && st.OverdueSeconds > 0
	})
	broken.down.Store(false)
	poll.Until(t, 30*time.Second, "the schedule to run again", func() bool { return e.status(t, "stall").Running })
}

// failingStore fails every statement while down, as an unreachable
// database does.
type failingStore struct {
	*db.Queries
	down atomic.Bool
}

func (s *failingStore) WindowCountsNow(ctx context.Context) (int64, error) {
	if s.down.Load() {
		return 0, fmt.Errorf("dial tcp: connection refused")
	}
	return s.Queries.WindowCountsNow(ctx)
}

// TestCleanupPurgesOldAuditEntries: a run removes audit log entries older
// than the retention by the database's clock (90 days by default; 30 here)
// and keeps the others.
func TestCleanupPurgesOldAuditEntries(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, &countingStore{Queries: db.New(e.sqlDB)}, WithBatches(2, 3), WithAuditRetention(30*24*time.Hour))
	now := time.Now().UnixMilli()
	day := 24 * time.Hour.Milliseconds()
	for i, age := range []int64{0, day, 29 * day, 31 * day, 100 * day, 400 * day} {
		if _, err := e.sqlDB.Exec(`INSERT INTO ratelimit_audit_log (workspace_id, actor_key_id, action, target,
			before_value, after_value, request_id, created_at) VALUES ('ws', 'key_1', 'override.create', ?, '', '{}', 'req', ?)`,
			fmt.Sprint("t", i), now-age); err != nil {
			t.Fatal(err)
		}
	}
	e.start(t, "audit", "{}")
	poll.Until(t, 20*time.Second, "the old entries to go", func() bool { return e.status(t, "audit").TotalAuditPurged == 3 })
	left := e.column(t, "SELECT target FROM ratelimit_audit_log ORDER BY target")
	if want := []string{"t0", "t1", "t2"}; !slices.Equal(left, want) {
		t.Fatalf("entries left %v, want %v (those within 30 days)", left, want)
	}
}

// TestCleanupPurgesExpiredSettlements: a run removes the records of
// settled reservations that can no longer be settled and keeps the others.
func TestCleanupPurgesExpiredSettlements(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, &countingStore{Queries: db.New(e.sqlDB)}, WithBatches(2, 3))
	now := time.Now().UnixMilli()
	for i, expires := range []int64{now - 3_600_000, now - 1000, now + 60_000, now + 86_400_000} {
		id := fmt.Sprintf("%016d", i)
		if _, err := e.sqlDB.Exec(`INSERT INTO ratelimit_reservation_settlements (id, cost, expires_at) VALUES (?, ?, ?)`,
			id, i, expires); err != nil {
			t.Fatal(err)
		}
	}
	e.start(t, "settlements", "{}")
	poll.Until(t, 20*time.Second, "the expired records to go", func() bool { return e.status(t, "settlements").TotalSettlementsPurged == 2 })
	var left []int64
	rows, err := e.sqlDB.Query("SELECT cost FROM ratelimit_reservation_settlements ORDER BY cost")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var cost int64
		rows.Scan(&cost)
		left = append(left, cost)
	}
	if want := []int64{2, 3}; !slices.Equal(left, want) {
		t.Fatalf("records left %v, want %v (those not expired)", left, want)
	}
}

// TestCleanupPurgesExpiredPenalties: a run removes the penalty boxes
// whose block ended more than its length ago, in batches, and keeps the
// others.
func TestCleanupPurgesExpiredPenalties(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, &countingStore{Queries: db.New(e.sqlDB)}, WithBatches(2, 3))
	now := time.Now().UnixMilli()
	for i, expires := range []int64{now - 3_600_000, now - 2000, now - 1000, now + 60_000} {
		if _, err := e.sqlDB.Exec(`INSERT INTO ratelimit_penalties (workspace_id, namespace, identifier, started_at, until_at, expires_at, updated_at)
			VALUES ('ws', 'ns', ?, 0, 0, ?, 0)`, fmt.Sprint(i), expires); err != nil {
			t.Fatal(err)
		}
	}
	e.start(t, "penalties", "{}")
	poll.Until(t, 20*time.Second, "the expired boxes to go", func() bool { return e.status(t, "penalties").TotalPenaltiesPurged == 3 })
	left := e.column(t, "SELECT identifier FROM ratelimit_penalties ORDER BY identifier")
	if want := []string{"3"}; !slices.Equal(left, want) {
		t.Fatalf("boxes left %v, want %v (the one that still matters)", left, want)
	}
}

// TestCleanupRollsUpAnalytics: a run sums the minutes of the hours that
// ended into hours (named identifiers too, the most denied first), the
// hours of the days that ended into days, and purges the minutes past
// their retention; a second run writes the same.
func TestCleanupRollsUpAnalytics(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, &countingStore{Queries: db.New(e.sqlDB)}, WithBatches(2, 3))
	hour := time.Now().Truncate(time.Hour).Add(-2 * time.Hour).UnixMilli()
	old := time.Now().Add(-30 * time.Hour).Truncate(time.Minute).UnixMilli()
	for i, r := range []struct {
		bucket         int64
		id             string
		passed, denied int
	}{{hour, "alice", 5, 1}, {hour + 60_000, "alice", 2, 4}, {hour + 59*60_000, "bob", 9, 0}, {old, "carol", 1, 1}} {
		if _, err := e.sqlDB.Exec(`INSERT INTO ratelimit_analytics (workspace_id, namespace, granularity, bucket, passed, denied)
			VALUES ('ws', 'api', 1, ?, ?, ?)`, r.bucket, r.passed, r.denied); err != nil {
			t.Fatal(err, i)
		}
		if _, err := e.sqlDB.Exec(`INSERT INTO ratelimit_analytics_top (workspace_id, namespace, granularity, bucket, identifier, passed, denied)
			VALUES ('ws', 'api', 1, ?, ?, ?, ?)`, r.bucket, r.id, r.passed, r.denied); err != nil {
			t.Fatal(err, i)
		}
	}
	e.start(t, "rollup", "{}")
	poll.Until(t, 20*time.Second, "a run", func() bool { return e.status(t, "rollup").Runs >= 1 })
	var passed, denied int
	if err := e.sqlDB.QueryRow(`SELECT passed, denied FROM ratelimit_analytics WHERE granularity = 2 AND bucket = ?`, hour).Scan(&passed, &denied); err != nil || passed != 16 || denied != 5 {
		t.Fatalf("the hour: %d passed, %d denied (%v); want 16 and 5", passed, denied, err)
	}
	var first string
	if err := e.sqlDB.QueryRow(`SELECT identifier FROM ratelimit_analytics_top WHERE granularity = 2 AND bucket = ?
		ORDER BY denied DESC LIMIT 1`, hour).Scan(&first); err != nil || first != "alice" {
		t.Fatalf("the hour's most denied: %q (%v), want alice", first, err)
	}
	var oldMinutes int
	e.sqlDB.QueryRow(`SELECT COUNT(*) FROM ratelimit_analytics WHERE granularity = 1 AND bucket = ?`, old).Scan(&oldMinutes)
	if oldMinutes != 0 || e.status(t, "rollup").TotalAnalyticsPurged < 2 {
		t.Fatalf("a minute 30 hours old is kept (%d), or not counted purged (%d)", oldMinutes, e.status(t, "rollup").TotalAnalyticsPurged)
	}
}

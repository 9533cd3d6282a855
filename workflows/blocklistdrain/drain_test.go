package blocklistdrain

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/restatedev/sdk-go/server"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

type env struct {
	sqlDB   *sql.DB
	restate *testserver.Restate
	ep      *testserver.Endpoint
}

func setup(t *testing.T) *env {
	t.Helper()
	_, sqlDB := dbtest.Start(t)
	e := &env{sqlDB: sqlDB, restate: testserver.StartRestate(t)}
	e.ep = testserver.ServeEndpoint(t, e.restate, e.handler(t))
	return e
}

func (e *env) handler(t *testing.T) http.Handler {
	h, err := server.NewRestate().WithLogger(slog.DiscardHandler, true).WithIdentityV1(e.restate.IdentityKey).Bind(Definition(db.New(e.sqlDB))).Handler()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (e *env) insert(t *testing.T, n int, created, expires int64) {
	t.Helper()
	q := db.New(e.sqlDB)
	for i := 0; i < n; i++ {
		if err := q.BulkInsertBlocklist(context.Background(), db.BulkInsertBlocklistParams{WorkspaceID: "ws", Namespace: "ns",
			Identifier: fmt.Sprint("id", created, "-", expires, "-", i), DurationMs: 1000, Sequence: int64(i), ExpiresAt: uint64(expires), CreatedAt: uint64(created)}); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) tableRows(t *testing.T) (int, bool) {
	t.Helper()
	var n int
	err := e.sqlDB.QueryRow("SELECT COUNT(*) FROM ratelimit_blocklist").Scan(&n)
	if err != nil && strings.Contains(err.Error(), "1146") {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return n, true
}

func (e *env) status(t *testing.T, id string) Status {
	t.Helper()
	var st Status
	if err := e.restate.Call("/BlocklistDrain/"+id+"/Status", "", &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func waitStage(t *testing.T, e *env, id, stage string, within time.Duration) Status {
	t.Helper()
	var st Status
	poll.Until(t, within, "the workflow to reach "+stage, func() bool {
		st = e.status(t, id)
		return st.Stage == stage
	})
	return st
}

// TestDrainWalksEveryStage drains a table whose last row expires in an hour;
// the test moves the expiry back once it has seen the workflow wait. The worker is killed during the durable sleep and
// started again; the workflow wakes on time, deletes the rows in batches,
// waits for approval without dropping, and drops the table once approved.
func TestDrainWalksEveryStage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	now := time.Now().UnixMilli()
	e.insert(t, 3, now-60_000, now-1000)      // expired
	e.insert(t, 2, now-60_000, now+3_600_000) // expires in an hour
	if _, err := e.restate.Post(e.restate.IngressURL+"/BlocklistDrain/d1/Run/send",
		fmt.Sprintf(`{"cutoverAt":%d,"batchSize":2,"recheckSeconds":1}`, now-30_000)); err != nil {
		t.Fatal(err)
	}
	st := waitStage(t, e, "d1", StageWaitForExpiry, 10*time.Second)
	if st.WaitingUntil.IsZero() || !strings.Contains(st.Detail, "5 rows left") {
		t.Fatalf("wait stage %+v, want the rows left and when it wakes", st)
	}
	if n, ok := e.tableRows(t); !ok || n != 5 {
		t.Fatalf("table during the wait: %d rows, exists %v; want 5 rows", n, ok)
	}
	// The worker dies in the middle of the durable sleep and comes back.
	e.ep.Kill()
	time.Sleep(time.Second)
	e.ep.SetHandler(e.handler(t))
	e.ep.Start()
	if st := e.status(t, "d1"); st.Stage != StageWaitForExpiry {
		t.Fatalf("after the restart: %+v, want still waiting", st)
	}
	// Time passes: the rows expire (moved back, rather than waiting an
	// hour), and the workflow sees it at its next look.
	if _, err := e.sqlDB.Exec("UPDATE ratelimit_blocklist SET expires_at = ?", now-500); err != nil {
		t.Fatal(err)
	}
	st = waitStage(t, e, "d1", StageAwaitApproval, 20*time.Second)
	if st.RowsDeleted != 5 {
		t.Fatalf("await stage %+v, want 5 rows deleted", st)
	}
	// Not approved: the table stays.
	time.Sleep(500 * time.Millisecond)
	if n, ok := e.tableRows(t); !ok || n != 0 {
		t.Fatalf("table before approval: %d rows, exists %v; want it empty and still there", n, ok)
	}
	if _, err := e.restate.Post(e.restate.IngressURL+"/BlocklistDrain/d1/Approve", `{"by":"operator"}`); err != nil {
		t.Fatal(err)
	}
	st = waitStage(t, e, "d1", StageDone, 10*time.Second)
	if _, ok := e.tableRows(t); ok || st.ApprovedBy != "operator" {
		t.Fatalf("after approval: table exists %v, status %+v", ok, st)
	}
}

// TestDrainRefusesWhileSomethingWrites keeps the workflow at its first stage
// when a row was created after the cutover, and says why.
func TestDrainRefusesWhileSomethingWrites(t *testing.T) {
	t.Parallel()
	e := setup(t)
	now := time.Now().UnixMilli()
	e.insert(t, 1, now-1000, now-500) // created after the cutover below
	if _, err := e.restate.Post(e.restate.IngressURL+"/BlocklistDrain/d2/Run/send",
		fmt.Sprintf(`{"cutoverAt":%d,"recheckSeconds":1}`, now-60_000)); err != nil {
		t.Fatal(err)
	}
	st := waitStage(t, e, "d2", StageVerify, 10*time.Second)
	time.Sleep(2500 * time.Millisecond) // two more checks
	st = e.status(t, "d2")
	if st.Stage != StageVerify || !strings.Contains(st.Detail, "after the cutover") {
		t.Fatalf("status %+v, want it held at verify with the reason", st)
	}
	if n, ok := e.tableRows(t); !ok || n != 1 {
		t.Fatal("the workflow touched a table it should not have passed")
	}
	// An approval does not skip stages.
	if _, err := e.restate.Post(e.restate.IngressURL+"/BlocklistDrain/d2/Approve", `{"by":"operator"}`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if st := e.status(t, "d2"); st.Stage != StageVerify {
		t.Fatalf("status %+v after an early approval, want still at verify", st)
	}
}

// TestDrainFarFutureExpiry waits for a row that expires near 2^62 ms: the
// wait is one recheck interval, not a negative sleep that spins.
func TestDrainFarFutureExpiry(t *testing.T) {
	t.Parallel()
	e := setup(t)
	now := time.Now().UnixMilli()
	e.insert(t, 1, now-60_000, 1<<62)
	if _, err := e.restate.Post(e.restate.IngressURL+"/BlocklistDrain/d3/Run/send",
		fmt.Sprintf(`{"cutoverAt":%d,"recheckSeconds":30}`, now-30_000)); err != nil {
		t.Fatal(err)
	}
	st := waitStage(t, e, "d3", StageWaitForExpiry, 10*time.Second)
	// Measured from when the stage was recorded (the database's clock, read
	// just after the one the wait was computed from), not from the test's
	// now: on a loaded machine the test may see the stage seconds late.
	if wait := st.WaitingUntil.Sub(st.UpdatedAt); wait < 29*time.Second || wait > 30*time.Second {
		t.Fatalf("waiting until %v, %v after the stage was recorded at %v; want one recheck interval of 30 s", st.WaitingUntil, wait, st.UpdatedAt)
	}
}

// TestDrainRejectsOutOfRangeInput refuses a recheck interval that would
// overflow a duration, naming the field.
func TestDrainRejectsOutOfRangeInput(t *testing.T) {
	t.Parallel()
	e := setup(t)
	out, err := e.restate.Post(e.restate.IngressURL+"/BlocklistDrain/d4/Run", `{"recheckSeconds":18446744075}`)
	if err == nil || !strings.Contains(err.Error()+out, "recheckSeconds: must be between") {
		t.Fatalf("answer %q, %v; want recheckSeconds refused", out, err)
	}
}

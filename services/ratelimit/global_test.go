package ratelimit

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/dbtest"
	"github.com/unkeyed/ratelimit/internal/poll"
	"github.com/unkeyed/ratelimit/internal/testserver"
)

// region is one region's limiter on a shared database, with the global loop
// driven by hand.
type region struct {
	*Service
	st *globalState
}

func openGlobalDB(t *testing.T) (*testserver.MariaDB, *sql.DB) {
	t.Helper()
	return dbtest.Start(t)
}

func newRegion(t *testing.T, name string, sqlDB *sql.DB, clock Clock, opts ...Option) *region {
	t.Helper()
	s, err := New(name, append([]Option{WithClock(clock), WithGlobalStore(NewMySQLStore(sqlDB))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &region{Service: s, st: newGlobalState()}
}

// flush is a full flush; promptFlush a prompt one.
func (r *region) flush()       { r.flushGlobal(context.Background(), r.st, true) }
func (r *region) promptFlush() { r.flushGlobal(context.Background(), r.st, false) }
func (r *region) sync()        { r.syncGlobal(context.Background(), r.st) }

// rows returns "identifier/sequence/region=count" for every row.
func rows(t *testing.T, sqlDB *sql.DB) []string {
	t.Helper()
	rs, err := sqlDB.Query("SELECT identifier, sequence, region, count FROM ratelimit_window_counts")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var id, reg string
		var seq, count int64
		if err := rs.Scan(&id, &seq, &reg, &count); err != nil {
			t.Fatal(err)
		}
		out = append(out, id+"/"+itoa(seq)+"/"+reg+"="+itoa(count))
	}
	sort.Strings(out)
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func spend(t *testing.T, s *Service, id string, limit, n int64) {
	t.Helper()
	for i := int64(0); i < n; i++ {
		if !mustLimit(t, s, req(id, limit, time.Minute, 1)).Success {
			t.Fatalf("request %d of %d on %s denied", i+1, n, id)
		}
	}
}

func TestGlobalCounterInvariants(t *testing.T) {
	_, sqlDB := openGlobalDB(t)
	clock := newFakeClock(600_000) // window 10 of one minute
	us, eu := newRegion(t, "us", sqlDB, clock), newRegion(t, "eu", sqlDB, clock)

	// Below the floor (5 of 10) nothing is published.
	spend(t, us.Service, "k", 10, 4)
	us.flush()
	if got := rows(t, sqlDB); len(got) != 0 {
		t.Fatalf("rows below the utilization floor: %v", got)
	}
	spend(t, us.Service, "k", 10, 2) // 6 of 10
	us.flush()
	us.flush() // unchanged: the change filter writes nothing
	if got := testutil.ToFloat64(us.metrics.globalWrites); got != 1 {
		t.Fatalf("%v rows written for one changed cell flushed twice, want 1", got)
	}
	// eu imports us's 6 and counts it in its decisions.
	eu.sync()
	if resp := mustLimit(t, eu.Service, req("k", 10, time.Minute, 0)); resp.Remaining != 4 {
		t.Fatalf("eu sees %d remaining after us spent 6 of 10, want 4", resp.Remaining)
	}
	// eu spends 3 (below its own floor, but the cell is shared already, so
	// eu publishes too) and imports are never published back.
	spend(t, eu.Service, "k", 10, 3)
	for range 3 {
		us.flush()
		eu.flush()
		us.sync()
		eu.sync()
	}
	want := []string{"k/10/eu=3", "k/10/us=6"}
	if got := rows(t, sqlDB); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("rows after several rounds = %v, want %v (imported counts republished?)", got, want)
	}
	if resp := mustLimit(t, us.Service, req("k", 10, time.Minute, 0)); resp.Remaining != 1 {
		t.Fatalf("us sees %d remaining, want 1 (6 own + 3 imported)", resp.Remaining)
	}

	// An older, delayed publish never lowers a component; publishing twice
	// is harmless.
	store := NewMySQLStore(sqlDB)
	cell := Cell{Workspace: "ws", Namespace: "ns", Identifier: "k", Duration: time.Minute, Sequence: 10}
	for _, n := range []int64{2, 6, 6} {
		if _, err := store.Publish(context.Background(), "us", clock.Now(), []CellCount{{Cell: cell, Count: n}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := rows(t, sqlDB); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("rows after a stale and a repeated publish = %v, want %v", got, want)
	}

	// The own row only raises the regional count: another process of us
	// published 8; this process holds 6 and rises to 8. A lower own row
	// changes nothing.
	if _, err := store.Publish(context.Background(), "us", clock.Now(), []CellCount{{Cell: cell, Count: 8}}); err != nil {
		t.Fatal(err)
	}
	us2 := newRegion(t, "us", sqlDB, clock)
	spend(t, us2.Service, "k", 10, 1)
	us.sync()
	us2.sync()
	w := us.findWindow(&windowKey{"ws", "ns", "k", 60_000})
	cur, _, _ := w.cellsAt(10, true)
	if got := cur.count.Load(); got != 8 {
		t.Fatalf("us's regional count = %d after its own row says 8, want 8", got)
	}
	w2 := us2.findWindow(&windowKey{"ws", "ns", "k", 60_000})
	cur2, _, _ := w2.cellsAt(10, true)
	if cur2.count.Load() != 8 || cur2.global.Load() != 3 {
		t.Fatalf("us2: count %d global %d, want 8 and 3", cur2.count.Load(), cur2.global.Load())
	}
}

// TestGlobalConvergesInAnyOrder publishes and imports in different orders
// across three regions; every order ends with the same sums.
func TestGlobalConvergesInAnyOrder(t *testing.T) {
	orders := [][]string{
		{"a.flush", "b.flush", "c.flush", "a.sync", "b.sync", "c.sync"},
		{"c.sync", "c.flush", "b.sync", "a.sync", "b.flush", "a.flush", "c.sync", "b.sync", "a.sync"},
		{"b.flush", "a.sync", "c.flush", "b.sync", "a.flush", "c.sync", "a.sync", "b.sync"},
	}
	var results []string
	for _, order := range orders {
		_, sqlDB := openGlobalDB(t)
		clock := newFakeClock(600_000)
		regions := map[string]*region{}
		for i, name := range []string{"a", "b", "c"} {
			regions[name] = newRegion(t, name, sqlDB, clock)
			spend(t, regions[name].Service, "k", 12, int64(6+i)) // 6, 7, 8 of 12: all above the floor
		}
		for _, step := range order {
			name, op, _ := strings.Cut(step, ".")
			if op == "flush" {
				regions[name].flush()
			} else {
				regions[name].sync()
			}
		}
		// Finish with a full round, as the loops would.
		for _, name := range []string{"a", "b", "c"} {
			regions[name].flush()
		}
		var sums []string
		for _, name := range []string{"a", "b", "c"} {
			regions[name].sync()
			w := regions[name].findWindow(&windowKey{"ws", "ns", "k", 60_000})
			cur, _, _ := w.cellsAt(10, true)
			sums = append(sums, name+":"+itoa(cur.count.Load())+"+"+itoa(cur.global.Load()))
		}
		results = append(results, strings.Join(sums, " ")+" | "+strings.Join(rows(t, sqlDB), " "))
	}
	want := "a:6+15 b:7+14 c:8+13 | k/10/a=6 k/10/b=7 k/10/c=8"
	for i, r := range results {
		if r != want {
			t.Fatalf("order %d ended with %q, want %q", i, r, want)
		}
	}
}

// TestBatchesAreNeverPublished holds a batch open (speculative increments
// applied, not committed) while flushing: only committed counts reach the
// store.
func TestSpeculativeCountsAreNeverPublished(t *testing.T) {
	_, sqlDB := openGlobalDB(t)
	clock := newFakeClock(600_000)
	us := newRegion(t, "us", sqlDB, clock)
	spend(t, us.Service, "k", 10, 4)
	w := us.findWindow(&windowKey{"ws", "ns", "k", 60_000})
	cur, _, _ := w.cellsAt(10, true)
	if !w.applySpeculative(cur, cur.count.Load(), 3) { // a batch in flight: 7 of 10
		t.Fatal("speculative increment failed")
	}
	us.flush()
	if got := rows(t, sqlDB); len(got) != 0 {
		t.Fatalf("speculative increments were published: %v", got)
	}
	w.commit(cur, 3)
	us.flush()
	if got := rows(t, sqlDB); strings.Join(got, " ") != "k/10/us=7" {
		t.Fatalf("rows after commit = %v, want k/10/us=7", got)
	}
}

// TestMariaDBDownMidFlush kills the database: decisions go on, the flush
// fails and counts it, and once the database is back the unwritten rows are
// written.
func TestMariaDBDownMidFlush(t *testing.T) {
	m, sqlDB := openGlobalDB(t)
	clock := newFakeClock(600_000)
	us := newRegion(t, "us", sqlDB, clock)
	spend(t, us.Service, "k", 10, 6)
	m.Kill()
	spend(t, us.Service, "k", 10, 2) // requests unaffected
	us.flush()
	us.sync()
	if got := testutil.ToFloat64(us.metrics.globalWriteErrors); got != 1 {
		t.Fatalf("write errors = %v, want 1", got)
	}
	if got := testutil.ToFloat64(us.metrics.globalSyncErrors); got != 1 {
		t.Fatalf("sync errors = %v, want 1", got)
	}
	m.Start()
	poll.Until(t, 5*time.Second, "the flush after restart", func() bool {
		us.globalBreaker = us.newGlobalBreaker() // do not wait out the open breaker
		us.flush()
		got := rows(t, sqlDB)
		return len(got) == 1 && got[0] == "k/10/us=8"
	})
}

// TestFutureRowsAreIgnored: a row dated a thousand windows ahead, from a
// region with a broken clock or a hostile writer, neither resets a spent key
// nor creates state; it is counted.
func TestFutureRowsAreIgnored(t *testing.T) {
	_, sqlDB := openGlobalDB(t)
	clock := newFakeClock(600_000)
	a := newRegion(t, "a", sqlDB, clock)
	spend(t, a.Service, "spent", 10, 10)
	seq := int64(600_000/60_000) + 1001
	if _, err := sqlDB.Exec(`INSERT INTO ratelimit_window_counts
		(workspace_id, namespace, identifier, duration_ms, sequence, region, count, expires_at, updated_at)
		VALUES ('ws', 'ns', 'spent', 60000, ?, 'b', 1, ?, 1)`, seq, (seq+2)*60_000); err != nil {
		t.Fatal(err)
	}
	a.sync()
	if resp := mustLimit(t, a.Service, req("spent", 10, time.Minute, 1)); resp.Success {
		t.Fatalf("a future row reset the budget: %+v", resp)
	}
	if got := testutil.ToFloat64(a.metrics.globalRowsFuture); got != 1 {
		t.Fatalf("future rows counted = %v, want 1", got)
	}
}

// TestSyncCreatesWindowsOnlyAboveTheFloor: a process that holds no window
// for a key creates one on sync only when the other regions' sum reaches
// the floor of the limit they published; keys only shared, or only this
// region's own, cost it nothing; a key it holds imports any count.
func TestSyncCreatesWindowsOnlyAboveTheFloor(t *testing.T) {
	_, sqlDB := openGlobalDB(t)
	clock := newFakeClock(600_000)
	b := newRegion(t, "b", sqlDB, clock)
	spend(t, b.Service, "held", 10, 1)
	insert := func(id, region string, count, limit int64) {
		t.Helper()
		if _, err := sqlDB.Exec(`INSERT INTO ratelimit_window_counts
			(workspace_id, namespace, identifier, duration_ms, sequence, region, count, expires_at, updated_at, window_limit)
			VALUES ('ws', 'ns', ?, 60000, 10, ?, ?, 720000, ?, ?)`, id, region, count, time.Now().UnixMilli(), limit); err != nil {
			t.Fatal(err)
		}
	}
	insert("hot", "a", 6, 10)  // above half of 10
	insert("thin", "a", 2, 10) // published only because another region shares it
	insert("mine", "b", 9, 10) // this region's own row
	insert("held", "a", 2, 10) // below the floor, but b holds the key
	b.sync()
	for id, want := range map[string]bool{"hot": true, "thin": false, "mine": false, "held": true} {
		if got := b.findWindow(&windowKey{"ws", "ns", id, 60_000}) != nil; got != want {
			t.Errorf("window for %q after sync: %v, want %v", id, got, want)
		}
	}
	if got := mustLimit(t, b.Service, req("held", 10, time.Minute, 0)).Remaining; got != 7 {
		t.Fatalf("held key: remaining %d, want 7 (1 own + 2 imported)", got)
	}
	if got := testutil.ToFloat64(b.metrics.globalEntriesCreated); got != 1 {
		t.Fatalf("windows created by sync = %v, want 1", got)
	}
}

// TestSyncReadsOnlyChangedRows: after the first sync, which reads every live
// row, a sync reads only the cells changed since the previous one (with the
// lookback), on the real clock and a real MariaDB.
func TestSyncReadsOnlyChangedRows(t *testing.T) {
	_, sqlDB := openGlobalDB(t)
	// 30-day windows: on the real clock, no window boundary falls between
	// two steps of the test.
	const month = 30 * 24 * time.Hour
	now := time.Now()
	seq := now.UnixMilli() / month.Milliseconds()
	old := now.Add(-time.Minute).UnixMilli()
	var values []string
	for i := range 1000 {
		values = append(values, fmt.Sprintf("('ws','ns','old%d',%d,%d,'a',60,%d,%d,100)", i, month.Milliseconds(), seq, (seq+2)*month.Milliseconds(), old))
	}
	if _, err := sqlDB.Exec(`INSERT INTO ratelimit_window_counts
		(workspace_id, namespace, identifier, duration_ms, sequence, region, count, expires_at, updated_at, window_limit)
		VALUES ` + strings.Join(values, ",")); err != nil {
		t.Fatal(err)
	}
	b := newRegion(t, "b", sqlDB, systemClock{})
	b.sync()
	if got := testutil.ToFloat64(b.metrics.globalRowsLastPoll); got != 1000 {
		t.Fatalf("first sync read %v rows, want all 1000", got)
	}
	a := newRegion(t, "a", sqlDB, systemClock{})
	for i := range 10 {
		for range 6 {
			mustLimit(t, a.Service, req(fmt.Sprint("new", i), 10, month, 1))
		}
	}
	a.flush()
	b.sync()
	if got := testutil.ToFloat64(b.metrics.globalRowsLastPoll); got != 10 {
		t.Fatalf("second sync read %v rows, want the 10 changed", got)
	}
	if got := mustLimit(t, b.Service, req("new3", 10, month, 0)).Remaining; got != 4 {
		t.Fatalf("a changed key in b: remaining %d, want 4", got)
	}
}

// TestTrailingSpacesKeepBudgetsApart: "alice" spending her whole limit in
// region a does not spend "alice " in region b. Under a PAD SPACE collation
// the two share a MySQL row: the row "alice " created would take "alice"'s
// count, and b would import it for "alice ".
func TestTrailingSpacesKeepBudgetsApart(t *testing.T) {
	_, sqlDB := openGlobalDB(t)
	clock := newFakeClock(600_000)
	a, b := newRegion(t, "a", sqlDB, clock), newRegion(t, "b", sqlDB, clock)
	spend(t, a.Service, "alice ", 10, 6)
	a.flush()
	spend(t, a.Service, "alice", 10, 10)
	a.flush()
	spend(t, b.Service, "alice ", 10, 1)
	b.sync()
	if got := mustLimit(t, b.Service, req("alice ", 10, time.Minute, 0)).Remaining; got != 3 {
		t.Fatalf(`"alice " in b: remaining %d, want 3 (1 here, 6 in a; "alice"'s 10 are not hers)`, got)
	}
	if got := mustLimit(t, b.Service, req("alice", 10, time.Minute, 0)).Remaining; got != 0 {
		t.Fatalf(`"alice" in b: remaining %d, want 0`, got)
	}
}

// TestSyncChangedHalfTheTable reads 12,000 changed cells of 24,000 (two
// regions' rows each) with the changed-cells query, within the timeout of
// one sync. MariaDB's own plan for that query probed an unindexed temporary
// table once per row of the table past a few thousand changed cells and took
// 36 s here; the query forces the plan that looks each changed cell up by
// its unique key.
func TestSyncChangedHalfTheTable(t *testing.T) {
	_, sqlDB := openGlobalDB(t)
	store := NewMySQLStore(sqlDB)
	ctx := context.Background()
	now := time.Now()
	counts := make([]CellCount, 24_000)
	for i := range counts {
		counts[i] = CellCount{Cell: Cell{Workspace: "ws", Namespace: "api", Identifier: fmt.Sprintf("user_%05d", i),
			Duration: time.Hour, Sequence: now.UnixMilli() / time.Hour.Milliseconds()}, Count: 60, Limit: 100}
	}
	for _, region := range []string{"a", "b"} {
		if _, err := store.Publish(ctx, region, now.Add(-time.Minute), counts); err != nil {
			t.Fatal(err)
		}
	}
	changed := counts[:12_000]
	for i := range changed {
		changed[i].Count = 70
	}
	if _, err := store.Publish(ctx, "b", now, changed); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, globalFlushTimeout)
	defer cancel()
	rows, err := db.New(sqlDB).WindowCountsSyncChanged(ctx, db.WindowCountsSyncChangedParams{
		Region: "a", Since: uint64(now.UnixMilli()), Now: uint64(now.UnixMilli())})
	if err != nil {
		t.Fatalf("changed-cells query: %v", err)
	}
	if len(rows) != 12_000 {
		t.Fatalf("%d cells, want the 12,000 changed", len(rows))
	}
	for _, r := range rows {
		if r.Own != 60 || r.Imported != 70 {
			t.Fatalf("%s: own %d imported %d, want 60 and 70", r.Identifier, r.Own, r.Imported)
		}
	}
}

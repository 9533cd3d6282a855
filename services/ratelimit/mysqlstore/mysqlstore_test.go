package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// TestMain drops the MySQL driver's own log lines: the fault tests make it
// report every refused connection.
func TestMain(m *testing.M) {
	mysql.SetLogger(log.New(io.Discard, "", 0))
	os.Exit(m.Run())
}

// month is the window of the tests on the wall clock: no window boundary
// falls between two steps of a test.
const month = ratelimit.MaxDuration

func cell(id string, now time.Time) store.CellKey {
	return store.CellKey{Workspace: "ws", Namespace: "ns", Identifier: id, Duration: month, Sequence: now.UnixMilli() / month.Milliseconds()}
}

func publish(t *testing.T, s *Store, region string, counts ...store.CellCount) {
	t.Helper()
	if n, err := s.Publish(context.Background(), region, counts); err != nil || n != len(counts) {
		t.Fatalf("Publish: %d of %d, %v", n, len(counts), err)
	}
}

func sync(t *testing.T, s *Store, region string, now, since time.Time) map[string]store.GlobalCount {
	t.Helper()
	out, _ := syncAsOf(t, s, region, now, since)
	return out
}

// syncAsOf is sync that also returns the database's time the sync began.
func syncAsOf(t *testing.T, s *Store, region string, now, since time.Time) (map[string]store.GlobalCount, time.Time) {
	t.Helper()
	rows, asOf, err := s.Sync(context.Background(), region, now, since)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.GlobalCount{}
	for _, r := range rows {
		out[r.Key.Identifier] = r
	}
	return out, asOf
}

// age moves every row's updated_at back by d: the database's clock stamps
// the rows, so tests age them instead of moving a clock.
func age(t *testing.T, sqlDB *sql.DB, d time.Duration) {
	t.Helper()
	if _, err := sqlDB.Exec("UPDATE ratelimit_window_counts SET updated_at = updated_at - ?", d.Milliseconds()); err != nil {
		t.Fatal(err)
	}
}

// TestPublishIsAGCounter: each region raises only its own component, with
// GREATEST, so a delayed, older publish never lowers it and publishing twice
// is harmless; a sync reads back the own component and the sum of the
// others', with the largest limit another region published.
func TestPublishIsAGCounter(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	s := New(sqlDB)
	now := time.Now()
	k := cell("k", now)
	publish(t, s, "us", store.CellCount{Key: k, Count: 6, Limit: 10})
	publish(t, s, "eu", store.CellCount{Key: k, Count: 3, Limit: 12})
	publish(t, s, "ap", store.CellCount{Key: k, Count: 1, Limit: 8})
	for _, n := range []int64{2, 6, 6} {
		publish(t, s, "us", store.CellCount{Key: k, Count: n, Limit: 10})
	}
	if got := sync(t, s, "us", now, time.Time{})["k"]; got.Own != 6 || got.Others != 4 || got.OthersLimit != 12 {
		t.Fatalf("us reads %+v, want own 6, others 3+1, others' limit 12", got)
	}
	if got := sync(t, s, "eu", now, time.Time{})["k"]; got.Own != 3 || got.Others != 7 || got.OthersLimit != 10 {
		t.Fatalf("eu reads %+v, want own 3, others 6+1, others' limit 10", got)
	}
}

// TestSyncReadsOnlyChangedRows: a sync since a moment returns only the cells
// with a row changed at or after it, with all their regions' rows; an idle
// one returns nothing; expired cells never come back.
func TestSyncReadsOnlyChangedRows(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	s := New(sqlDB)
	now := time.Now()
	var counts []store.CellCount
	for i := range 1000 {
		counts = append(counts, store.CellCount{Key: cell(fmt.Sprint("old", i), now), Count: 60, Limit: 100})
	}
	publish(t, s, "a", counts...)
	age(t, sqlDB, time.Minute)
	expired := store.CellKey{Workspace: "ws", Namespace: "ns", Identifier: "expired", Duration: time.Minute, Sequence: now.UnixMilli()/60_000 - 2}
	publish(t, s, "a", store.CellCount{Key: expired, Count: 9})
	got, asOf := syncAsOf(t, s, "b", now, time.Time{})
	if len(got) != 1000 {
		t.Fatalf("a full sync read %d cells, want the 1000 live ones", len(got))
	}
	if d := time.Since(asOf); d < -time.Second || d > time.Second {
		t.Fatalf("the sync's as-of time %v is not the database's clock (%v from this one's)", asOf, d)
	}
	for i := range 10 {
		publish(t, s, "a", store.CellCount{Key: cell(fmt.Sprint("new", i), now), Count: 6, Limit: 10})
	}
	publish(t, s, "b", store.CellCount{Key: cell("old7", now), Count: 1, Limit: 100})
	got, asOf = syncAsOf(t, s, "b", now, asOf.Add(-time.Second))
	if len(got) != 11 {
		t.Fatalf("a sync since the changes read %d cells, want the 11 changed", len(got))
	}
	if o := got["old7"]; o.Own != 1 || o.Others != 60 {
		t.Fatalf("old7: %+v, want own 1 and the unchanged 60 of a", o)
	}
	age(t, sqlDB, time.Second)
	if got := sync(t, s, "b", now, asOf); len(got) != 0 {
		t.Fatalf("an idle sync read %d cells, want none", len(got))
	}
}

// TestSyncChangedHalfTheTable reads 12,000 changed cells of 24,000 (two
// regions' rows each) with the changed-cells query, within the timeout of
// one sync (10 s). MariaDB's own plan for that query probed an unindexed
// temporary table once per row of the table past a few thousand changed
// cells and took 36 s here; the query forces the plan that looks each
// changed cell up by its unique key.
func TestSyncChangedHalfTheTable(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	s := New(sqlDB)
	ctx := context.Background()
	now := time.Now()
	counts := make([]store.CellCount, 24_000)
	for i := range counts {
		counts[i] = store.CellCount{Key: store.CellKey{Workspace: "ws", Namespace: "api", Identifier: fmt.Sprintf("user_%05d", i),
			Duration: time.Hour, Sequence: now.UnixMilli() / time.Hour.Milliseconds()}, Count: 60, Limit: 100}
	}
	for _, region := range []string{"a", "b"} {
		publish(t, s, region, counts...)
	}
	age(t, sqlDB, time.Minute)
	dbNow, err := db.New(sqlDB).WindowCountsNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	changed := counts[:12_000]
	for i := range changed {
		changed[i].Count = 70
	}
	publish(t, s, "b", changed...)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := db.New(sqlDB).WindowCountsSyncChanged(ctx, db.WindowCountsSyncChangedParams{
		Region: "a", Since: uint64(dbNow), Now: uint64(now.UnixMilli())})
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

// TestTrailingSpacesAreDistinct: "alice" and "alice " are different rows.
// Under a PAD SPACE collation they would share one, and "alice "'s region
// would import "alice"'s count.
func TestTrailingSpacesAreDistinct(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	s := New(sqlDB)
	now := time.Now()
	publish(t, s, "a", store.CellCount{Key: cell("alice ", now), Count: 6, Limit: 10})
	publish(t, s, "a", store.CellCount{Key: cell("alice", now), Count: 10, Limit: 10})
	got := sync(t, s, "b", now, time.Time{})
	if len(got) != 2 || got["alice "].Others != 6 || got["alice"].Others != 10 {
		t.Fatalf("b reads %+v, want alice 10 and \"alice \" 6 apart", got)
	}
}

// TestStoreDown: with the database killed, Publish and Sync fail within the
// caller's deadline, and Publish says how much it wrote.
func TestStoreDown(t *testing.T) {
	m, sqlDB := dbtest.Start(t)
	s := New(sqlDB)
	now := time.Now()
	m.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if n, err := s.Publish(ctx, "a", []store.CellCount{{Key: cell("k", now), Count: 6}}); err == nil || n != 0 {
		t.Fatalf("Publish to a dead database: %d, %v; want 0 and an error", n, err)
	}
	if _, _, err := s.Sync(ctx, "a", now, time.Time{}); err == nil {
		t.Fatal("Sync from a dead database succeeded")
	}
	m.Start()
	publish(t, s, "a", store.CellCount{Key: cell("k", now), Count: 6})
	if got := rows(t, sqlDB); !slices.Equal(got, []string{"k/a=6"}) {
		t.Fatalf("rows after the database came back: %v", got)
	}
}

// rows returns "identifier/region=count" for every row, sorted.
func rows(t *testing.T, sqlDB *sql.DB) []string {
	t.Helper()
	rs, err := sqlDB.Query("SELECT identifier, region, count FROM ratelimit_window_counts ORDER BY identifier, region")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var id, region string
		var n int64
		if err := rs.Scan(&id, &region, &n); err != nil {
			t.Fatal(err)
		}
		out = append(out, id+"/"+region+"="+fmt.Sprint(n))
	}
	return out
}

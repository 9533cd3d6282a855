package ratelimit

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/internal/poll"
)

// countingStore counts the calls a GlobalStore receives and the rows it is
// given.
type countingStore struct {
	GlobalStore
	publishes, published, syncs, rowsSynced atomic.Int64
}

func (c *countingStore) Publish(ctx context.Context, region string, now time.Time, counts []CellCount) (int, error) {
	c.publishes.Add(1)
	c.published.Add(int64(len(counts)))
	return c.GlobalStore.Publish(ctx, region, now, counts)
}

func (c *countingStore) Sync(ctx context.Context, region string, now, since time.Time) ([]GlobalCount, error) {
	c.syncs.Add(1)
	rows, err := c.GlobalStore.Sync(ctx, region, now, since)
	c.rowsSynced.Add(int64(len(rows)))
	return rows, err
}

// TestPromptFlush checks what a prompt flush publishes: a cell as soon as it
// crosses the utilization floor, then each growth of at least a tenth of the
// limit; smaller growth waits for the full flush, and cells nobody counted
// into since the last flush cost nothing.
func TestPromptFlush(t *testing.T) {
	_, sqlDB := openGlobalDB(t)
	clock := newFakeClock(600_000) // window 10 of one minute
	store := &countingStore{GlobalStore: NewMySQLStore(sqlDB)}
	s, err := New("us", WithClock(clock), WithGlobalStore(store))
	if err != nil {
		t.Fatal(err)
	}
	us := &region{Service: s, st: newGlobalState()}
	want := func(when string, rowsWant ...string) {
		t.Helper()
		if got := rows(t, sqlDB); strings.Join(got, " ") != strings.Join(rowsWant, " ") {
			t.Fatalf("rows %s = %v, want %v", when, got, rowsWant)
		}
	}
	spend(t, s, "k", 100, 49)
	us.promptFlush()
	want("below the floor (49 of 100)")
	spend(t, s, "k", 100, 1)
	us.promptFlush()
	want("after crossing the floor", "k/10/us=50")
	spend(t, s, "k", 100, 9)
	us.promptFlush()
	want("after growing by 9, less than a step of 10", "k/10/us=50")
	us.flush()
	want("after a full flush", "k/10/us=59")
	spend(t, s, "k", 100, 10)
	us.promptFlush()
	want("after growing by a step", "k/10/us=69")

	// Many cells above the floor; only those counted into since are looked
	// at, and only those that grew by a step are written.
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = "hot_" + itoa(int64(i))
		if !mustLimit(t, s, req(ids[i], 100, time.Minute, 60)).Success {
			t.Fatal("denied")
		}
	}
	us.promptFlush()
	if n := len(rows(t, sqlDB)); n != 201 {
		t.Fatalf("%d rows after 200 cells crossed the floor, want 201", n)
	}
	before := store.published.Load()
	calls := store.publishes.Load()
	us.promptFlush()
	if store.publishes.Load() != calls {
		t.Fatal("a prompt flush with nothing counted since wrote to the store")
	}
	for _, id := range ids[:10] {
		mustLimit(t, s, req(id, 100, time.Minute, 10))
	}
	for _, id := range ids[10:20] {
		mustLimit(t, s, req(id, 100, time.Minute, 1))
	}
	us.promptFlush()
	if got := store.published.Load() - before; got != 10 {
		t.Fatalf("prompt flush wrote %d rows, want the 10 cells that grew by a step", got)
	}
	us.flush()
	if got := store.published.Load() - before; got != 20 {
		t.Fatalf("prompt and full flush wrote %d rows, want 20: the full flush writes the 10 smaller growths", got)
	}
	if got := testutil.ToFloat64(s.metrics.queueOverflow.WithLabelValues("flush")); got != 0 {
		t.Fatalf("%v cells did not fit the flush queue", got)
	}
}

// TestGlobalLoopIdleStatements runs the flush and sync loop on short
// intervals against a real MariaDB and counts the statements the server
// receives once nothing changes any more: one per sync (the count of changed
// rows that finds none) and none per flush, prompt or full. The limiter's
// clock jumps past the sync's lookback once the cells are published, and
// then moves 10 ms per poll of the test, so that full flushes come due.
func TestGlobalLoopIdleStatements(t *testing.T) {
	_, sqlDB := openGlobalDB(t)
	store := &countingStore{GlobalStore: NewMySQLStore(sqlDB)}
	clock := newFakeClock(time.Now().UnixMilli())
	s, err := New("us", WithGlobalStore(store), WithClock(clock),
		WithGlobalFlushIntervals(10*time.Millisecond, 50*time.Millisecond), WithGlobalSyncInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		mustLimit(t, s, req("user_"+itoa(int64(i)), 100, 30*24*time.Hour, 60))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	poll.Until(t, 5*time.Second, "the first flush and syncs", func() bool { return store.published.Load() == 100 && store.syncs.Load() >= 3 })

	clock.Advance(globalSyncLookback + time.Second)
	syncs := store.syncs.Load()
	poll.Until(t, 5*time.Second, "a sync after the lookback", func() bool { return store.syncs.Load() > syncs+1 })

	q0, syncs0, pubs0 := questions(t, sqlDB), store.syncs.Load(), store.publishes.Load()
	poll.Until(t, 5*time.Second, "30 idle syncs", func() bool {
		clock.Advance(10 * time.Millisecond)
		return store.syncs.Load()-syncs0 >= 30
	})
	q1, syncs1, pubs1 := questions(t, sqlDB), store.syncs.Load(), store.publishes.Load()
	// The first status read counts itself; a sync may be under way at
	// either read.
	statements := q1 - q0 - 1
	syncs = syncs1 - syncs0
	t.Logf("idle: %d statements over %d syncs and %d flushes", statements, syncs, pubs1-pubs0)
	if pubs1 != pubs0 {
		t.Errorf("%d publishes while nothing changed, want none", pubs1-pubs0)
	}
	if statements < syncs-1 || statements > syncs+1 {
		t.Errorf("%d statements over %d idle syncs, want one per sync", statements, syncs)
	}
}

// questions returns how many statements the server has received.
func questions(t testing.TB, sqlDB *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	if err := sqlDB.QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

package ratelimit

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/dbtest"
)

// discardStore is a GlobalStore that keeps nothing, to time the flush walk
// alone.
type discardStore struct{ published int }

func (d *discardStore) Publish(_ context.Context, _ string, _ time.Time, counts []CellCount) (int, error) {
	d.published += len(counts)
	return len(counts), nil
}

func (d *discardStore) Sync(context.Context, string, time.Time, time.Time) ([]GlobalCount, error) {
	return nil, nil
}

// BenchmarkFlushWalk240k walks 240,000 windows (ten times the load the design was sized for), 10 %
// of them above the utilization floor, collecting and sorting what to
// publish, with a store that discards it.
func BenchmarkFlushWalk240k(b *testing.B) {
	clock := newFakeClock(600_000)
	store := &discardStore{}
	s, err := New("us", WithClock(clock), WithGlobalStore(store))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 240_000; i++ {
		cost := int64(1)
		if i%10 == 0 {
			cost = 60 // above the floor of 50
		}
		s.Limit(ctx, Request{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i), Limit: 100, Duration: time.Minute, Cost: cost})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st := newGlobalState() // every hot cell changed
		s.flushGlobal(ctx, st, true)
	}
	b.StopTimer()
	b.ReportMetric(float64(store.published)/float64(b.N), "rows/flush")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/flush")
}

func benchDB(b *testing.B) *sql.DB {
	_, sqlDB := dbtest.Start(b)
	return sqlDB
}

// BenchmarkBulkUpsert5k publishes 5,000 changed rows in one flush against a
// real MariaDB (one chunk: one statement).
func BenchmarkBulkUpsert5k(b *testing.B) {
	store := NewMySQLStore(benchDB(b))
	counts := make([]CellCount, 5000)
	for i := range counts {
		counts[i] = CellCount{Cell: Cell{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i),
			Duration: time.Minute, Sequence: 29_000_000}, Count: 50}
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range counts {
			counts[j].Count++ // every row changes, as in a busy flush
		}
		if _, err := store.Publish(ctx, "us", time.Now(), counts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/upsert")
}

// BenchmarkSync45k reads 45,000 live cells published by other regions (the
// ten times the load the design was sized for) from a real MariaDB and imports them into the limiter.
func BenchmarkSync45k(b *testing.B) {
	sqlDB := benchDB(b)
	store := NewMySQLStore(sqlDB)
	publish45k(b, store)
	ctx := context.Background()
	s, err := New("us", WithGlobalStore(store))
	if err != nil {
		b.Fatal(err)
	}
	st := newGlobalState()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.syncGlobal(ctx, st)
	}
	b.StopTimer()
	if got := s.ActiveWindows(); got != 45_000 {
		b.Fatalf("%d windows after sync, want 45,000", got)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/sync")
}

// BenchmarkLimitWarmWithGlobal is BenchmarkLimitWarm with the flush and sync
// loop running against a real MariaDB.
func BenchmarkLimitWarmWithGlobal(b *testing.B) {
	benchLimitWithGlobal(b, 0)
}

// BenchmarkLimitSharedWithGlobal is BenchmarkLimitWarmWithGlobal on a key
// above the utilization floor: every request also queues the cell for the
// next prompt flush, which costs one atomic load once it is queued.
func BenchmarkLimitSharedWithGlobal(b *testing.B) {
	benchLimitWithGlobal(b, warmRequest.Limit/2)
}

// benchLimitWithGlobal times warm requests with the global loop running,
// after a first request of cost first (none if 0).
func benchLimitWithGlobal(b *testing.B, first int64) {
	s, err := New("us", WithGlobalStore(NewMySQLStore(benchDB(b))))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	rq := warmRequest
	if first > 0 {
		rq.Cost = first
	}
	s.Limit(context.Background(), rq)
	rq.Cost = warmRequest.Cost
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Limit(context.Background(), rq)
	}
}

// BenchmarkSyncChanged45k is the incremental sync at ten times the design load:
// 45,000 live cells from other regions, of which 500 (or none, for an idle
// process) changed since the previous sync. Before the sync read only
// changed rows, every sync read all 45,000 (BenchmarkSync45k).
func BenchmarkSyncChanged45k(b *testing.B) {
	for _, n := range []int{500, 0} {
		b.Run("changed="+strconv.Itoa(n), func(b *testing.B) { benchSyncChanged(b, n) })
	}
}

func benchSyncChanged(b *testing.B, changedN int) {
	sqlDB := benchDB(b)
	store := NewMySQLStore(sqlDB)
	now := time.Now()
	counts := publish45k(b, store)
	ctx := context.Background()
	// They changed long ago: outside any sync's lookback.
	if _, err := sqlDB.Exec("UPDATE ratelimit_window_counts SET updated_at = ?", now.Add(-time.Minute).UnixMilli()); err != nil {
		b.Fatal(err)
	}
	s, err := New("us", WithGlobalStore(store))
	if err != nil {
		b.Fatal(err)
	}
	st := newGlobalState()
	s.syncGlobal(ctx, st) // the first sync reads everything
	changed := counts[:changedN]
	var rows float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for j := range changed {
			changed[j].Count++
		}
		if _, err := store.Publish(ctx, "eu", time.Now(), changed); err != nil {
			b.Fatal(err)
		}
		st.lastSync = time.Now() // as if the previous sync had just run
		b.StartTimer()
		s.syncGlobal(ctx, st)
		rows += testutil.ToFloat64(s.metrics.globalRowsLastPoll)
	}
	b.ReportMetric(rows/float64(b.N), "rows/sync")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/sync")
}

// publish45k publishes 45,000 live cells of region "eu" (count 50 of 100)
// and returns them.
func publish45k(b *testing.B, store *MySQLStore) []CellCount {
	seq := time.Now().UnixMilli() / 60_000
	counts := make([]CellCount, 45_000)
	for i := range counts {
		counts[i] = CellCount{Cell: Cell{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i),
			Duration: time.Minute, Sequence: seq}, Count: 50, Limit: 100}
	}
	if _, err := store.Publish(context.Background(), "eu", time.Now(), counts); err != nil {
		b.Fatal(err)
	}
	return counts
}

// BenchmarkGlobalLoop240k runs one process's flush and sync loop on the
// default schedule against a real MariaDB at ten times the load the design
// was sized for: 240,000 windows, 10 % of them (24,000) above the
// utilization floor and shared with a second region. Each iteration is one
// second of wall time in which changed cells of the 24,000 grow by a flush
// step in both regions (this process counts requests into them; the other
// region's rows are written directly, as its own prompt flush would). It
// reports the statements MySQL received from the process per second, the
// rows it wrote per second and the rows each sync read.
//
// The schedule=10s variants run the conservative schedule (10 s for every
// interval); run them for 30 or more iterations to span several ticks.
func BenchmarkGlobalLoop240k(b *testing.B) {
	for _, sched := range []struct {
		name string
		opts []Option
	}{
		{"default", nil},
		{"10s", []Option{WithGlobalFlushIntervals(10*time.Second, 10*time.Second), WithGlobalSyncInterval(10 * time.Second)}},
	} {
		for _, changed := range []int{0, 1_000, 5_000} {
			b.Run("schedule="+sched.name+"/changed="+strconv.Itoa(changed)+"/s", func(b *testing.B) { benchGlobalLoop(b, changed, sched.opts) })
		}
	}
}

func benchGlobalLoop(b *testing.B, changedPerSecond int, opts []Option) {
	const (
		windows = 240_000
		active  = windows / 10
		limit   = 1_000_000
		step    = limit / 10
	)
	sqlDB := benchDB(b)
	store := &countingStore{GlobalStore: NewMySQLStore(sqlDB)}
	s, err := New("us", append([]Option{WithGlobalStore(store)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := func(i int, cost int64) Request {
		return Request{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i), Limit: limit, Duration: 30 * 24 * time.Hour, Cost: cost}
	}
	for i := range windows {
		cost := int64(1)
		if i < active {
			cost = limit / 2 // at the floor
		}
		if _, err := s.Limit(ctx, req(i, cost)); err != nil {
			b.Fatal(err)
		}
	}
	// The other region holds the same active cells.
	other := NewMySQLStore(sqlDB)
	seq := time.Now().UnixMilli() / (30 * 24 * time.Hour).Milliseconds()
	otherCounts := make([]CellCount, active)
	for i := range otherCounts {
		otherCounts[i] = CellCount{Cell: Cell{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i),
			Duration: 30 * 24 * time.Hour, Sequence: seq}, Count: 1, Limit: limit}
	}
	if _, err := other.Publish(ctx, "eu", time.Now(), otherCounts); err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(runCtx); close(done) }()
	defer func() { cancel(); <-done }()
	// Let the first full flush and sync and the lookback pass.
	time.Sleep(globalSyncLookback + 3*s.globalEvery.flush)

	var statements, written, syncs, synced int64
	next := 0
	b.ResetTimer()
	for range b.N {
		q0, w0, n0, r0 := questions(b, sqlDB), store.published.Load(), store.syncs.Load(), store.rowsSynced.Load()
		otherStatements := int64(0)
		start := time.Now()
		// Spread the second's changes over ten slices.
		for slice := range 10 {
			batch := make([]CellCount, 0, changedPerSecond/10)
			for range changedPerSecond / 10 {
				i := next % active
				next++
				s.Limit(ctx, req(i, step/2)) // this region: half a step now...
				s.Limit(ctx, req(i, step/2)) // ...and half later, a step in all
				otherCounts[i].Count += step
				batch = append(batch, otherCounts[i])
			}
			if len(batch) > 0 {
				slices.SortFunc(batch, func(a, b CellCount) int { return compareCells(&a.Cell, &b.Cell) })
				if _, err := other.Publish(ctx, "eu", time.Now(), batch); err != nil {
					b.Fatal(err)
				}
				otherStatements += int64((len(batch) + db.WindowCountsBulkUpsertMaxRows - 1) / db.WindowCountsBulkUpsertMaxRows)
			}
			time.Sleep(time.Until(start.Add(time.Duration(slice+1) * 100 * time.Millisecond)))
		}
		q1 := questions(b, sqlDB)
		statements += q1 - q0 - 1 - otherStatements // the first status read counts itself
		written += store.published.Load() - w0
		syncs += store.syncs.Load() - n0
		synced += store.rowsSynced.Load() - r0
	}
	b.StopTimer()
	b.ReportMetric(float64(statements)/float64(b.N), "statements/s")
	b.ReportMetric(float64(written)/float64(b.N), "rows-written/s")
	b.ReportMetric(float64(synced)/float64(max(syncs, 1)), "rows-read/sync")
}

package mysqlstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/services/ratelimit"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// BenchmarkBulkUpsert5k publishes 5,000 changed rows in one flush against a
// real MariaDB (one chunk: one statement).
func BenchmarkBulkUpsert5k(b *testing.B) {
	_, sqlDB := dbtest.Start(b)
	s := New(sqlDB)
	counts := make([]store.CellCount, 5000)
	for i := range counts {
		counts[i] = store.CellCount{Key: store.CellKey{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i),
			Duration: time.Minute, Sequence: 29_000_000}, Count: 50}
	}
	ctx := context.Background()
	for b.Loop() {
		for j := range counts {
			counts[j].Count++ // every row changes, as in a busy flush
		}
		if _, err := s.Publish(ctx, "us", counts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/upsert")
}

// publish45k publishes 45,000 live cells of region "eu" (count 50 of 100,
// ten times the load the design was sized for) and returns them.
func publish45k(b *testing.B, s *Store) []store.CellCount {
	seq := time.Now().UnixMilli() / 60_000
	counts := make([]store.CellCount, 45_000)
	for i := range counts {
		counts[i] = store.CellCount{Key: store.CellKey{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i),
			Duration: time.Minute, Sequence: seq}, Count: 50, Limit: 100}
	}
	if _, err := s.Publish(context.Background(), "eu", counts); err != nil {
		b.Fatal(err)
	}
	return counts
}

// BenchmarkSync45k reads 45,000 live cells published by other regions, as a
// full sync does (the limiter's import of them: ratelimit's
// BenchmarkSyncApply45k).
func BenchmarkSync45k(b *testing.B) {
	_, sqlDB := dbtest.Start(b)
	s := New(sqlDB)
	publish45k(b, s)
	ctx := context.Background()
	for b.Loop() {
		rows, _, err := s.Sync(ctx, "us", time.Now(), time.Time{})
		if err != nil || len(rows) != 45_000 {
			b.Fatalf("%d rows, %v; want 45,000", len(rows), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/sync")
}

// BenchmarkSyncChanged45k is the incremental sync on the same table: 500
// cells (or none, for an idle process) changed since the previous sync.
func BenchmarkSyncChanged45k(b *testing.B) {
	for _, n := range []int{500, 0} {
		b.Run("changed="+strconv.Itoa(n), func(b *testing.B) { benchSyncChanged(b, n) })
	}
}

func benchSyncChanged(b *testing.B, changedN int) {
	_, sqlDB := dbtest.Start(b)
	s := New(sqlDB)
	counts := publish45k(b, s)
	ctx := context.Background()
	// They changed long ago: outside any sync's lookback.
	if _, err := sqlDB.Exec("UPDATE ratelimit_window_counts SET updated_at = updated_at - 60000"); err != nil {
		b.Fatal(err)
	}
	if _, _, err := s.Sync(ctx, "us", time.Now(), time.Time{}); err != nil { // the first sync reads everything
		b.Fatal(err)
	}
	changed := counts[:changedN]
	var rows float64
	for b.Loop() {
		b.StopTimer()
		for j := range changed {
			changed[j].Count++
		}
		since, err := db.New(sqlDB).WindowCountsNow(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Publish(ctx, "eu", changed); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		got, _, err := s.Sync(ctx, "us", time.Now(), time.UnixMilli(since).Add(-time.Second))
		if err != nil {
			b.Fatal(err)
		}
		rows += float64(len(got))
	}
	b.ReportMetric(rows/float64(b.N), "rows/sync")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/sync")
}

// warmRequest is the ratelimit package's benchmark request: a limit that
// never denies.
var warmRequest = ratelimit.Request{Workspace: "ws_1234", Namespace: "api.requests", Identifier: "user_42",
	Limit: 1 << 53, Duration: time.Minute, Cost: 1}

// BenchmarkLimitWarmWithGlobal is the ratelimit package's LimitWarm with the
// flush and sync loop running against a real MariaDB.
func BenchmarkLimitWarmWithGlobal(b *testing.B) { benchLimitWithGlobal(b, 0) }

// BenchmarkLimitSharedWithGlobal is BenchmarkLimitWarmWithGlobal on a key
// above the utilization floor: every request also queues the cell for the
// next prompt flush, which costs one atomic load once it is queued.
func BenchmarkLimitSharedWithGlobal(b *testing.B) { benchLimitWithGlobal(b, warmRequest.Limit/2) }

// benchLimitWithGlobal times warm requests with the global loop running,
// after a first request of cost first (none if 0).
func benchLimitWithGlobal(b *testing.B, first int64) {
	_, sqlDB := dbtest.Start(b)
	s, err := ratelimit.New("us", ratelimit.WithGlobalStore(New(sqlDB)))
	if err != nil {
		b.Fatal(err)
	}
	run(b, s)
	rq := warmRequest
	if first > 0 {
		rq.Cost = first
	}
	s.Limit(context.Background(), rq)
	rq.Cost = warmRequest.Cost
	b.ReportAllocs()
	for b.Loop() {
		s.Limit(context.Background(), rq)
	}
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
		name  string
		flush time.Duration
		opts  []ratelimit.Option
	}{
		{"default", ratelimit.DefaultGlobalFlushInterval, nil},
		{"10s", 10 * time.Second, []ratelimit.Option{ratelimit.WithGlobalFlushIntervals(10*time.Second, 10*time.Second), ratelimit.WithGlobalSyncInterval(10 * time.Second)}},
	} {
		for _, changed := range []int{0, 1_000, 5_000} {
			b.Run("schedule="+sched.name+"/changed="+strconv.Itoa(changed)+"/s", func(b *testing.B) {
				benchGlobalLoop(b, changed, sched.flush, sched.opts)
			})
		}
	}
}

func benchGlobalLoop(b *testing.B, changedPerSecond int, flush time.Duration, opts []ratelimit.Option) {
	const (
		windows = 240_000
		active  = windows / 10
		limit   = 1_000_000
		step    = limit / 10
	)
	_, sqlDB := dbtest.Start(b)
	counting := &countingStore{Global: New(sqlDB)}
	s, err := ratelimit.New("us", append([]ratelimit.Option{ratelimit.WithGlobalStore(counting)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := func(i int, cost int64) ratelimit.Request {
		return ratelimit.Request{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i), Limit: limit, Duration: month, Cost: cost}
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
	other := New(sqlDB)
	seq := time.Now().UnixMilli() / month.Milliseconds()
	otherCounts := make([]store.CellCount, active)
	for i := range otherCounts {
		otherCounts[i] = store.CellCount{Key: store.CellKey{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i),
			Duration: month, Sequence: seq}, Count: 1, Limit: limit}
	}
	if _, err := other.Publish(ctx, "eu", otherCounts); err != nil {
		b.Fatal(err)
	}
	run(b, s)
	// Let the first full flush and sync and the sync's lookback pass.
	time.Sleep(time.Second + 3*flush)

	var statements, written, syncs, synced int64
	next := 0
	b.ResetTimer()
	for range b.N {
		q0, w0, n0, r0 := questions(b, sqlDB), counting.published.Load(), counting.syncs.Load(), counting.rowsSynced.Load()
		otherStatements := int64(0)
		start := time.Now()
		// Spread the second's changes over ten slices.
		for slice := range 10 {
			batch := make([]store.CellCount, 0, changedPerSecond/10)
			for range changedPerSecond / 10 {
				i := next % active
				next++
				s.Limit(ctx, req(i, step/2)) // this region: half a step now...
				s.Limit(ctx, req(i, step/2)) // ...and half later, a step in all
				otherCounts[i].Count += step
				batch = append(batch, otherCounts[i])
			}
			if len(batch) > 0 {
				// Key order, as the limiter publishes; the cells differ
				// only in their identifiers.
				slices.SortFunc(batch, func(x, y store.CellCount) int { return strings.Compare(x.Key.Identifier, y.Key.Identifier) })
				if _, err := other.Publish(ctx, "eu", batch); err != nil {
					b.Fatal(err)
				}
				otherStatements += int64((len(batch) + db.WindowCountsBulkUpsertMaxRows - 1) / db.WindowCountsBulkUpsertMaxRows)
			}
			time.Sleep(time.Until(start.Add(time.Duration(slice+1) * 100 * time.Millisecond)))
		}
		q1 := questions(b, sqlDB)
		statements += q1 - q0 - 1 - otherStatements // the first status read counts itself
		written += counting.published.Load() - w0
		syncs += counting.syncs.Load() - n0
		synced += counting.rowsSynced.Load() - r0
	}
	b.StopTimer()
	b.ReportMetric(float64(statements)/float64(b.N), "statements/s")
	b.ReportMetric(float64(written)/float64(b.N), "rows-written/s")
	b.ReportMetric(float64(synced)/float64(max(syncs, 1)), "rows-read/sync")
}

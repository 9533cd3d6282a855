package mysqlstore

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/ratelimit/redisstore"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// The tests of this file run limiters on a real MariaDB through their
// exported API, their global loops running on short intervals: what the
// limiter's own tests show on an in-memory store, shown on the real one.

// countingStore counts the calls a store.Global receives and the rows it
// passes.
//
// Calls are counted when they return, so that a count the test waited for
// is a statement the database has run (counted when sent, a publish still
// in flight on a loaded machine landed after the test had moved on).
type countingStore struct {
	store.Global
	publishes, published, syncs, rowsSynced atomic.Int64
}

func (c *countingStore) Publish(ctx context.Context, region string, counts []store.CellCount) (int, error) {
	n, err := c.Global.Publish(ctx, region, counts)
	c.published.Add(int64(n))
	c.publishes.Add(1)
	return n, err
}

func (c *countingStore) Sync(ctx context.Context, region string, now, since time.Time) ([]store.GlobalCount, time.Time, error) {
	rows, asOf, err := c.Global.Sync(ctx, region, now, since)
	c.rowsSynced.Add(int64(len(rows)))
	c.syncs.Add(1)
	return rows, asOf, err
}

// manualClock is a clock the test moves.
type manualClock struct{ ms atomic.Int64 }

func (c *manualClock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }

// run starts s's loops until the test ends.
func run(t testing.TB, s *ratelimit.Service) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// shortIntervals are the global loop's intervals in these tests.
var shortIntervals = []ratelimit.Option{
	ratelimit.WithGlobalFlushIntervals(10*time.Millisecond, 50*time.Millisecond), ratelimit.WithGlobalSyncInterval(10 * time.Millisecond)}

// TestTwoRegionsConverge: region a spends above half the limit; region b's
// decisions count it once a's flush and b's sync have run; b then admits
// only the rest, and a sees b's share back.
func TestTwoRegionsConverge(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	newRegion := func(name string) *ratelimit.Service {
		s, err := ratelimit.New(name, append([]ratelimit.Option{ratelimit.WithGlobalStore(New(sqlDB))}, shortIntervals...)...)
		if err != nil {
			t.Fatal(err)
		}
		run(t, s)
		return s
	}
	a, b := newRegion("a"), newRegion("b")
	rq := ratelimit.Request{Workspace: "ws", Namespace: "ns", Identifier: "k", Limit: 10, Duration: month, Cost: 6}
	if resp, err := a.Limit(context.Background(), rq); err != nil || !resp.Success {
		t.Fatalf("a: %+v, %v", resp, err)
	}
	poll.Until(t, 5*time.Second, "b to count a's 6", func() bool { return remaining(t, b, rq) == 4 })
	rq.Cost = 3 // below b's own floor, but the cell is shared: b publishes too
	if resp, err := b.Limit(context.Background(), rq); err != nil || !resp.Success {
		t.Fatalf("b: %+v, %v", resp, err)
	}
	poll.Until(t, 5*time.Second, "a to count b's 3", func() bool { return remaining(t, a, rq) == 1 })
	rq.Cost = 2
	if resp, _ := b.Limit(context.Background(), rq); resp.Success {
		t.Fatalf("b admitted 2 with 1 left: %+v", resp)
	}
}

// TestFaultsOverMySQL runs the limiter's global fault case with
// storetest's fault wrapper around the real store: with region a's store
// down, a decides on without error while its flushes and syncs fail; once
// the store is back, what a admitted meanwhile reaches the table and region
// b counts it.
func TestFaultsOverMySQL(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	faulty := storetest.NewFaultyGlobal(New(sqlDB))
	reg := prometheus.NewRegistry()
	a, err := ratelimit.New("a", append([]ratelimit.Option{ratelimit.WithGlobalStore(faulty), ratelimit.WithRegisterer(reg)}, shortIntervals...)...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, a)
	b, err := ratelimit.New("b", append([]ratelimit.Option{ratelimit.WithGlobalStore(New(sqlDB))}, shortIntervals...)...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, b)
	rq := ratelimit.Request{Workspace: "ws", Namespace: "ns", Identifier: "k", Limit: 10, Duration: month, Cost: 6}
	faulty.SetDown(true)
	if resp, err := a.Limit(context.Background(), rq); err != nil || !resp.Success {
		t.Fatalf("a with its store down: %+v, %v", resp, err)
	}
	errorsOf := func(name string) float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	poll.Until(t, 5*time.Second, "a's flush and sync to fail", func() bool {
		return errorsOf("unkey_ratelimit_global_write_errors_total") >= 1 && errorsOf("unkey_ratelimit_global_sync_errors_total") >= 1
	})
	peek := rq
	peek.Cost = 0
	if resp, _ := b.Limit(context.Background(), peek); resp.Remaining != 10 {
		t.Fatalf("b counted a's 6 while a's store was down: %+v", resp)
	}
	faulty.SetDown(false)
	poll.Until(t, 5*time.Second, "b to count a's 6 once a's store is back", func() bool {
		resp, _ := b.Limit(context.Background(), peek)
		return resp.Remaining == 4
	})
}

// TestSlowMySQLKeepsImporting: region b reaches MySQL through a proxy
// that holds every statement (and every step of a new connection's set-up)
// for delay. Its syncs take two statements and a new connection's set-up
// its own budget, so they complete within their budget and b imports what
// a publishes, while b's own flushes go on in their loop: a sees b's count
// too. The budgets are scaled to the delay as the defaults are to a
// database that holds each statement five seconds (a sync's 30 s, a
// flush's 10 s).
func TestSlowMySQLKeepsImporting(t *testing.T) {
	m, sqlDB := dbtest.Start(t)
	const delay = 400 * time.Millisecond
	proxy := testserver.StartProxy(t, "127.0.0.1:"+strconv.Itoa(m.Port))
	cfg, err := cmdutil.ParseMySQLDSN(m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = proxy.Addr
	slowDB, err := cmdutil.OpenMySQL(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slowDB.Close() })
	proxy.SetDelay(delay)
	newRegion := func(name string, sqlDB *sql.DB, opts ...ratelimit.Option) *ratelimit.Service {
		s, err := ratelimit.New(name, append(append([]ratelimit.Option{ratelimit.WithGlobalStore(New(sqlDB))}, shortIntervals...), opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		run(t, s)
		return s
	}
	a := newRegion("a", sqlDB)
	b := newRegion("b", slowDB, ratelimit.WithGlobalTimeouts(2*delay, 6*delay))
	rq := ratelimit.Request{Workspace: "ws", Namespace: "ns", Identifier: "k", Limit: 100, Duration: month, Cost: 60}
	if resp, err := a.Limit(context.Background(), rq); err != nil || !resp.Success {
		t.Fatalf("a: %+v, %v", resp, err)
	}
	start := time.Now()
	poll.Until(t, 30*time.Second, "b to import a's 60 through the slow database", func() bool { return remaining(t, b, rq) == 40 })
	t.Logf("b imported a's count %v after a spent it, each statement held %v", time.Since(start).Round(10*time.Millisecond), delay)
	rq.Cost = 30
	if resp, err := b.Limit(context.Background(), rq); err != nil || !resp.Success {
		t.Fatalf("b: %+v, %v", resp, err)
	}
	poll.Until(t, 30*time.Second, "a to count b's 30, published through the slow database", func() bool { return remaining(t, a, rq) == 10 })
}

// TestUnpublishedCountsOutliveTheirProcess: process a1 of region a admits
// 600 of 1,000 an hour and replays them to the region's Redis, but never
// reaches MySQL (it died, or stopped while MySQL was unreachable: its store
// is down to the end). Process a2 of the same region, which never sees the
// key, publishes it from Redis once no process marked it for two full flush
// intervals, and region b counts the 600.
func TestUnpublishedCountsOutliveTheirProcess(t *testing.T) {
	a1, a2reg, b := deadProcessSetup(t)
	rq := ratelimit.Request{Workspace: "ws", Namespace: "ns", Identifier: "k", Limit: 1000, Duration: time.Hour, Cost: 600}
	if resp, err := a1.Limit(context.Background(), rq); err != nil || !resp.Success {
		t.Fatalf("a1: %+v, %v", resp, err)
	}
	peek := rq
	peek.Cost = 0
	start := time.Now()
	poll.Until(t, 10*time.Second, "b to count a1's 600, published by a2 from Redis", func() bool {
		resp, _ := b.Limit(context.Background(), peek)
		return resp.Remaining == 400
	})
	t.Logf("b counted a1's 600 %v after a1 admitted them (idle after %v on these intervals)", time.Since(start).Round(time.Millisecond), 2*50*time.Millisecond+10*time.Millisecond)
	// a2 counts what it published once its upsert has returned, which b's
	// sync may see first: wait for the count too.
	var idle float64
	if !poll.Within(10*time.Second, func() bool {
		mfs, _ := a2reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "unkey_ratelimit_global_idle_cells_published_total" {
				idle = mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return idle >= 1
	}) {
		t.Fatalf("a2 published %v idle cells, want the key a1 left in Redis", idle)
	}
}

// TestUnpublishedSlotsOutliveTheirProcess is
// TestUnpublishedCountsOutliveTheirProcess for slots, which are taken in
// Redis at once rather than replayed: a1 holds 6 of 10 and never reaches
// MySQL; a2 publishes them from Redis, and region b holds them too.
func TestUnpublishedSlotsOutliveTheirProcess(t *testing.T) {
	a1, _, b := deadProcessSetup(t)
	acq := ratelimit.Acquisition{Workspace: "ws", Namespace: "ns", Identifier: "k", Limit: 10, Lease: time.Hour, Cost: 6}
	if resp, err := a1.Acquire(context.Background(), acq); err != nil || !resp.Success {
		t.Fatalf("a1: %+v, %v", resp, err)
	}
	poll.Until(t, 10*time.Second, "b to hold a1's 6 slots, published by a2 from Redis", func() bool {
		held, _ := b.InFlight(context.Background(), acq)
		return held == 6
	})
}

// deadProcessSetup starts, on one Redis and one MariaDB, processes a1 and
// a2 of region a, a1's global store down to the end, and b of region b
// without a regional store; it returns a1, a2's registry and b.
func deadProcessSetup(t *testing.T) (a1 *ratelimit.Service, a2reg *prometheus.Registry, b *ratelimit.Service) {
	t.Helper()
	_, sqlDB := dbtest.Start(t)
	r := testserver.StartRedis(t)
	opts, err := redisstore.Options(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	dead := storetest.NewFaultyGlobal(New(sqlDB))
	dead.SetDown(true)
	a1, _ = regionProcess(t, "a", dead, client)
	_, a2reg = regionProcess(t, "a", New(sqlDB), client)
	b, _ = regionProcess(t, "b", New(sqlDB), nil)
	return a1, a2reg, b
}

// regionProcess starts a limiter of region with the global store and, if
// client is not nil, the regional store on it, on short intervals.
func regionProcess(t *testing.T, region string, global store.Global, client *redis.Client) (*ratelimit.Service, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	o := append([]ratelimit.Option{ratelimit.WithGlobalStore(global), ratelimit.WithRegisterer(reg)}, shortIntervals...)
	if client != nil {
		st, err := redisstore.New(client)
		if err != nil {
			t.Fatal(err)
		}
		o = append(o, ratelimit.WithRegionalStore(st))
	}
	s, err := ratelimit.New(region, o...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, s)
	return s, reg
}

// TestGlobalLoopIdleStatements runs the flush and sync loop on short
// intervals and counts the statements the server receives once nothing
// changes any more: one per sync (the count of changed rows that finds
// none) and none per flush, prompt or full. Once the cells are published,
// the rows are aged past the sync's lookback (the database's clock stamps
// them, so the test moves them rather than a clock), and the limiter's
// clock moves 10 ms per poll of the test, so that full flushes come due.
func TestGlobalLoopIdleStatements(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	counting := &countingStore{Global: New(sqlDB)}
	clock := &manualClock{}
	clock.ms.Store(time.Now().UnixMilli())
	s, err := ratelimit.New("us", append([]ratelimit.Option{ratelimit.WithGlobalStore(counting), ratelimit.WithClock(clock)}, shortIntervals...)...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := s.Limit(context.Background(), ratelimit.Request{Workspace: "ws", Namespace: "ns", Identifier: "user_" + strconv.Itoa(i),
			Limit: 100, Duration: month, Cost: 60}); err != nil {
			t.Fatal(err)
		}
	}
	run(t, s)
	poll.Until(t, 5*time.Second, "the first flush and syncs", func() bool { return counting.published.Load() == 100 && counting.syncs.Load() >= 3 })
	if _, err := sqlDB.Exec("UPDATE ratelimit_window_counts SET updated_at = updated_at - 5000"); err != nil {
		t.Fatal(err)
	}
	syncs := counting.syncs.Load()
	poll.Until(t, 5*time.Second, "a sync after the lookback", func() bool { return counting.syncs.Load() > syncs+1 })

	q0, syncs0, pubs0 := questions(t, sqlDB), counting.syncs.Load(), counting.publishes.Load()
	poll.Until(t, 5*time.Second, "30 idle syncs", func() bool {
		clock.ms.Add(10)
		return counting.syncs.Load()-syncs0 >= 30
	})
	q1, syncs1, pubs1 := questions(t, sqlDB), counting.syncs.Load(), counting.publishes.Load()
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

// skewedClock is the wall clock moved by offset, started at base: a host
// whose clock disagrees with the others'.
type skewedClock struct {
	base, start time.Time
	offset      time.Duration
}

func (c skewedClock) Now() time.Time { return c.base.Add(time.Since(c.start) + c.offset) }

// TestClockSkewBetweenRegions: two regions whose clocks are 30 s ahead and
// 30 s behind the database's see each other's counts as promptly as
// regions that agree. The database's clock stamps the rows and starts each
// sync; a writer's stamps would hide a region that is behind from one that
// is ahead until the next full sync, five minutes later.
func TestClockSkewBetweenRegions(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	// Both clocks stay in one window of a month: the middle of the current one.
	now := time.Now()
	base := time.UnixMilli(now.UnixMilli()/month.Milliseconds()*month.Milliseconds() + month.Milliseconds()/2)
	newRegion := func(name string, offset time.Duration) *ratelimit.Service {
		s, err := ratelimit.New(name, append([]ratelimit.Option{ratelimit.WithGlobalStore(New(sqlDB)),
			ratelimit.WithClock(skewedClock{base: base, start: now, offset: offset})}, shortIntervals...)...)
		if err != nil {
			t.Fatal(err)
		}
		run(t, s)
		return s
	}
	ahead, behind := newRegion("ahead", 30*time.Second), newRegion("behind", -30*time.Second)
	var took []time.Duration
	for i := range 20 {
		from, to := ahead, behind
		if i%2 == 1 {
			from, to = behind, ahead
		}
		rq := ratelimit.Request{Workspace: "ws", Namespace: "ns", Identifier: "k" + strconv.Itoa(i), Limit: 10, Duration: month, Cost: 6}
		start := time.Now()
		if resp, err := from.Limit(context.Background(), rq); err != nil || !resp.Success {
			t.Fatalf("%s: %+v, %v", from.Region(), resp, err)
		}
		rq.Cost = 0
		poll.Until(t, 3*time.Second, to.Region()+" to count "+from.Region()+"'s 6 on "+rq.Identifier, func() bool {
			resp, err := to.Limit(context.Background(), rq)
			return err == nil && resp.Remaining == 4
		})
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("clocks 60 s apart: 20 keys converged across regions in %v (median) to %v (max)", took[len(took)/2], took[len(took)-1])
}

// remaining returns what s has left for rq's key, read with a request of
// cost 0, which counts nothing.
func remaining(t *testing.T, s *ratelimit.Service, rq ratelimit.Request) int64 {
	t.Helper()
	rq.Cost = 0
	resp, err := s.Limit(context.Background(), rq)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Remaining
}

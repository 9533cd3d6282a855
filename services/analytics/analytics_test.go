package analytics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/services/analytics"
)

// testStore is the contract of a Store: added counts add up, per minute and
// over coarser buckets; named identifiers add up over a range and come back
// the most denied first; other workspaces and namespaces stay apart.
func testStore(t *testing.T, s analytics.Store) {
	ctx := context.Background()
	now := time.Now().Truncate(time.Hour).Add(-2 * time.Hour) // within the minutes' span, on an hour
	m := func(i int) time.Time { return now.Add(time.Duration(i) * time.Minute) }
	b := func(ws, ns string, minute int, passed, denied int64) analytics.Bucket {
		return analytics.Bucket{Workspace: ws, Namespace: ns, Start: m(minute), Passed: passed, Denied: denied}
	}
	e := func(minute int, id string, passed, denied int64) analytics.Entry {
		return analytics.Entry{Bucket: b("ws", "api", minute, passed, denied), Identifier: id}
	}
	if err := s.Add(ctx, []analytics.Bucket{b("ws", "api", 0, 10, 2), b("ws", "api", 1, 5, 0), b("ws", "other", 0, 7, 7), b("ws2", "api", 0, 1, 1)},
		[]analytics.Entry{e(0, "alice", 3, 2), e(0, "bob", 7, 0), e(1, "bob", 5, 0)}); err != nil {
		t.Fatal(err)
	}
	// A second process adds to the same minute.
	if err := s.Add(ctx, []analytics.Bucket{b("ws", "api", 0, 1, 3)}, []analytics.Entry{e(0, "alice", 0, 3), e(0, "carol", 1, 0)}); err != nil {
		t.Fatal(err)
	}
	series, err := s.Series(ctx, "ws", "api", analytics.Minute, m(0), m(60))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]analytics.Point{{Start: m(0), Passed: 11, Denied: 5}, {Start: m(1), Passed: 5}})
	if fmt.Sprint(series) != want {
		t.Errorf("minutes: %v, want %v", series, want)
	}
	hours, err := s.Series(ctx, "ws", "api", analytics.Hour, m(0), m(60))
	if err != nil || len(hours) != 1 || hours[0].Passed != 16 || hours[0].Denied != 5 || !hours[0].Start.Equal(m(0)) {
		t.Errorf("hours: %v, %v; want one of 16 passed, 5 denied", hours, err)
	}
	top, err := s.Top(ctx, "ws", "api", m(0), m(60), 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := "[{alice 3 5} {bob 12 0} {carol 1 0}]"; fmt.Sprint(top) != want {
		t.Errorf("top: %v, want %s", top, want)
	}
	if top, _ := s.Top(ctx, "ws", "api", m(1), m(2), 10); fmt.Sprint(top) != "[{bob 5 0}]" {
		t.Errorf("top of the second minute: %v", top)
	}
	if top, _ := s.Top(ctx, "ws", "api", m(0), m(60), 1); len(top) != 1 || top[0].Identifier != "alice" {
		t.Errorf("top 1: %v", top)
	}
	if ns, err := s.Namespaces(ctx, "ws", m(0), m(60), 10); err != nil || fmt.Sprint(ns) != "[{other 7 7} {api 16 5}]" {
		t.Errorf("namespaces: %v, %v; want other (7 denied) before api (5)", ns, err)
	}
}

func TestMemoryStore(t *testing.T) {
	testStore(t, analytics.NewMemory(1000, time.Now))
}

func TestMySQLStore(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	testStore(t, analytics.NewMySQL(sqlDB, time.Now))
}

// zipf draws identifiers user_0, user_1, … with Zipf-distributed weights.
func zipf(rng *rand.Rand, n int) func() string {
	z := rand.NewZipf(rng, 1.2, 1, uint64(n-1))
	return func() string { return fmt.Sprint("user_", z.Uint64()) }
}

// TestRecorderNamesTheTopTenUnderZipf: 200,000 decisions of 5,000
// identifiers with Zipf-distributed traffic, denied where an identifier
// passes 50 in the flush, across two recorders (two processes): the store's
// totals are exact, and the true ten most denied are the answer's first
// ten, in any order.
func TestRecorderNamesTheTopTenUnderZipf(t *testing.T) {
	store := analytics.NewMemory(1_000_000, time.Now)
	now := time.Now().Truncate(time.Minute)
	clock := func() time.Time { return now }
	recs := make([]*analytics.Recorder, 2)
	for i := range recs {
		r, err := analytics.NewRecorder(store, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
			analytics.WithClock(clock), analytics.WithFlushInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = r
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for _, r := range recs {
		go func() { done <- r.Run(ctx) }()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	next := zipf(rng, 5000)
	seen := map[string]int{}
	denied := map[string]int{}
	var passed, deniedTotal int64
	for i := range 200_000 {
		id := next()
		seen[id]++
		ok := seen[id] <= 50
		if ok {
			passed++
		} else {
			denied[id]++
			deniedTotal++
		}
		recs[i%2].Record("ws", "api", id, ok)
		if i%10_000 == 0 {
			time.Sleep(time.Millisecond) // let the recorders keep up with the queue
		}
	}
	cancel()
	for range recs {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	series, _ := store.Series(context.Background(), "ws", "api", analytics.Minute, now, now.Add(time.Minute))
	if len(series) != 1 || series[0].Passed != passed || series[0].Denied != deniedTotal {
		t.Fatalf("series %v, want one minute of %d passed and %d denied", series, passed, deniedTotal)
	}
	top, _ := store.Top(context.Background(), "ws", "api", now, now.Add(time.Minute), 20)
	trueTop := rankByDenials(denied)[:10]
	answer := map[string]bool{}
	for _, it := range top[:10] {
		answer[it.Identifier] = true
	}
	for _, id := range trueTop {
		if !answer[id] {
			t.Errorf("%s, among the ten most denied (%d), is not in the answer's first ten: %v", id, denied[id], top[:10])
		}
	}
}

func rankByDenials(denied map[string]int) []string {
	ids := make([]string, 0, len(denied))
	for id := range denied {
		ids = append(ids, id)
	}
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			if denied[ids[j]] > denied[ids[i]] || denied[ids[j]] == denied[ids[i]] && ids[j] < ids[i] {
				ids[i], ids[j] = ids[j], ids[i]
			}
		}
	}
	return ids
}

// TestRecorderBoundsNamespaces: one workspace sending decisions in endless
// namespaces keeps at most its share of a flush interval's tallies; the
// rest are dropped and counted, and another workspace's are kept.
func TestRecorderBoundsNamespaces(t *testing.T) {
	store := analytics.NewMemory(1_000_000, time.Now)
	reg := prometheus.NewRegistry()
	r, err := analytics.NewRecorder(store, slog.New(slog.DiscardHandler), reg, analytics.WithFlushInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	for i := range 1500 {
		r.Record("greedy", fmt.Sprint("ns_", i), "u", false)
	}
	for i := range 10 {
		r.Record("other", fmt.Sprint("ns_", i), "u", true)
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	<-done
	from, to := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	greedy, _ := store.Namespaces(context.Background(), "greedy", from, to, 100_000)
	other, _ := store.Namespaces(context.Background(), "other", from, to, 100)
	if len(greedy) != 1000 || len(other) != 10 {
		t.Fatalf("namespaces kept: greedy %d (want 1000), other %d (want 10)", len(greedy), len(other))
	}
	if got := counterValue(t, reg, "unkey_analytics_dropped_total", "scopes"); got != 500 {
		t.Fatalf("dropped for scopes: %v, want 500", got)
	}
}

// counterValue returns the value of the series of a counter vector whose
// label is label.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

// failingStore refuses adds while down.
type failingStore struct {
	analytics.Store
	down  atomic.Bool
	tries atomic.Int64
}

func (f *failingStore) Add(ctx context.Context, b []analytics.Bucket, e []analytics.Entry) error {
	f.tries.Add(1)
	if f.down.Load() {
		return errors.New("dial tcp: connection refused")
	}
	return f.Store.Add(ctx, b, e)
}

// TestRecorderResendsAfterAFailedFlush: what a flush could not add is sent
// again with the next, so a store that was down loses nothing.
func TestRecorderResendsAfterAFailedFlush(t *testing.T) {
	mem := analytics.NewMemory(1000, time.Now)
	store := &failingStore{Store: mem}
	store.down.Store(true)
	reg := prometheus.NewRegistry()
	r, err := analytics.NewRecorder(store, slog.New(slog.DiscardHandler), reg, analytics.WithFlushInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	for range 5 {
		r.Record("ws", "api", "u", false)
	}
	poll.Until(t, 5*time.Second, "a failed flush", func() bool { return store.tries.Load() >= 2 })
	for range 3 {
		r.Record("ws", "api", "u", true)
	}
	store.down.Store(false)
	from, to := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	poll.Until(t, 5*time.Second, "every decision in the store", func() bool {
		s, _ := mem.Series(context.Background(), "ws", "api", analytics.Hour, from, to)
		return len(s) == 1 && s[0].Passed == 3 && s[0].Denied == 5
	})
	cancel()
	<-done
	if counterValue(t, reg, "unkey_analytics_dropped_total", "store") != 0 {
		t.Fatal("rows dropped though the store came back")
	}
}

// TestProcessLive: a process is live while its last report is at most
// three of its flush intervals old, and at least 5 s; a process that did
// not say its interval is given the default's.
func TestProcessLive(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		every, silent time.Duration
		live          bool
	}{
		{10 * time.Second, 0, true},
		{10 * time.Second, 29 * time.Second, true},
		{10 * time.Second, 30 * time.Second, true},
		{10 * time.Second, 30*time.Second + time.Millisecond, false},
		{10 * time.Second, 4 * time.Minute, false},
		{0, 30 * time.Second, true}, // an earlier version's row: 10 s assumed
		{0, 31 * time.Second, false},
		{time.Minute, 2 * time.Minute, true},
		{time.Minute, 3*time.Minute + time.Second, false},
		{200 * time.Millisecond, 4 * time.Second, true}, // 0.6 s, but 5 s at least
		{200 * time.Millisecond, 5*time.Second + time.Millisecond, false},
	} {
		p := analytics.Process{ID: "p", SeenAt: now.Add(-c.silent), FlushInterval: c.every}
		if got := p.Live(now); got != c.live {
			t.Errorf("flush interval %v, silent for %v: live %v, want %v", c.every, c.silent, got, c.live)
		}
	}
}

// testFleet is the contract of a Fleet fed by a recorder: each flush
// records the process with the recorder's flush interval, seen by the
// fleet's clock, and Processes leaves out those seen longer ago than asked.
func testFleet(t *testing.T, store analytics.Store, fleet analytics.Fleet, age func(id string, by time.Duration)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := analytics.NewRecorder(store, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
		analytics.WithFlushInterval(50*time.Millisecond),
		analytics.WithRollCall(fleet, func() analytics.Process {
			return analytics.Process{ID: "proc_1", Region: "eu", Breakers: map[string]string{"10.0.0.1:6379": "closed"}}
		}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	var got []analytics.Process
	var now time.Time
	poll.Until(t, 10*time.Second, "the process's roll call", func() bool {
		got, now, _ = fleet.Processes(ctx, time.Minute)
		return len(got) == 1
	})
	cancel()
	<-done
	p := got[0]
	if p.ID != "proc_1" || p.Region != "eu" || p.FlushInterval != 50*time.Millisecond || p.Breakers["10.0.0.1:6379"] != "closed" ||
		!p.Live(now) || now.Sub(p.SeenAt) < 0 || now.Sub(p.SeenAt) > 5*time.Second {
		t.Fatalf("the roll call %+v at %v, want proc_1 of eu reporting every 50ms, live", p, now)
	}
	// The process stops: two minutes on it is listed in a window of five,
	// gone, and left out of one of a minute.
	age("proc_1", 2*time.Minute)
	got, now, err = fleet.Processes(context.Background(), 5*time.Minute)
	if err != nil || len(got) != 1 || got[0].Live(now) || now.Sub(got[0].SeenAt) < 2*time.Minute {
		t.Fatalf("two minutes after its last report: %+v at %v (%v), want it listed, gone", got, now, err)
	}
	if got, _, err := fleet.Processes(context.Background(), time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("processes seen in the last minute: %+v (%v), want none", got, err)
	}
}

func TestMemoryFleet(t *testing.T) {
	var offset atomic.Int64
	mem := analytics.NewMemory(1000, func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	testFleet(t, mem, mem, func(_ string, by time.Duration) { offset.Add(int64(by)) })
}

func TestMySQLFleet(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	m := analytics.NewMySQL(sqlDB, time.Now)
	testFleet(t, m, m, func(id string, by time.Duration) {
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

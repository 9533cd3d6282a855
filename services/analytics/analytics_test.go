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

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/analytics/memstore"
)

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
	store := memstore.New(1_000_000, time.Now)
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
	store := memstore.New(1_000_000, time.Now)
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

func (f *failingStore) Add(ctx context.Context, batch string, b []analytics.Bucket, e []analytics.Entry) error {
	f.tries.Add(1)
	if f.down.Load() {
		return errors.New("dial tcp: connection refused")
	}
	return f.Store.Add(ctx, batch, b, e)
}

// TestRecorderResendsAfterAFailedFlush: what a flush could not add is sent
// again with the next, so a store that was down loses nothing.
func TestRecorderResendsAfterAFailedFlush(t *testing.T) {
	mem := memstore.New(1000, time.Now)
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

// runRecorder runs a recorder on st at the fixed time now, flushing only
// when flush stops it.
func runRecorder(t *testing.T, st analytics.Store, now time.Time) (r *analytics.Recorder, flush func()) {
	t.Helper()
	r, err := analytics.NewRecorder(st, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
		analytics.WithClock(func() time.Time { return now }), analytics.WithFlushInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return r, func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecordNCountsEveryDecision: what a proxy reports it decided itself
// (RecordN) counts as that many decisions, in the totals and in the
// ranking of denials, beside decisions recorded one at a time; a report of
// none counts nothing.
func TestRecordNCountsEveryDecision(t *testing.T) {
	store := memstore.New(1_000_000, time.Now)
	now := time.Now().Truncate(time.Minute)
	r, flush := runRecorder(t, store, now)
	r.RecordN("ws", "envoy", "bucket_a", false, 700)
	r.RecordN("ws", "envoy", "bucket_a", true, 300)
	r.RecordN("ws", "envoy", "bucket_c", false, 0)
	for range 5 {
		r.Record("ws", "envoy", "bucket_b", false)
	}
	flush()
	series, _ := store.Series(context.Background(), "ws", "envoy", analytics.Minute, now, now.Add(time.Minute))
	if len(series) != 1 || series[0].Passed != 300 || series[0].Denied != 705 {
		t.Fatalf("series %v, want one minute of 300 passed and 705 denied", series)
	}
	top, _ := store.Top(context.Background(), "ws", "envoy", now, now.Add(time.Minute), 10)
	if len(top) != 2 || top[0].Identifier != "bucket_a" || top[1].Identifier != "bucket_b" {
		t.Fatalf("top %v, want bucket_a (700 denied) then bucket_b (5)", top)
	}
}

// TestShadowDenialsCountApart: decisions a shadow limit would have refused
// count neither as passed nor as denied, and name the identifier they fell
// on even where it was never denied.
func TestShadowDenialsCountApart(t *testing.T) {
	store := memstore.New(1_000_000, time.Now)
	now := time.Now().Truncate(time.Minute)
	r, flush := runRecorder(t, store, now)
	for range 3 {
		r.RecordShadowDenied("ws", "api", "rollout")
	}
	r.Record("ws", "api", "rollout", true)
	r.Record("ws", "api", "bob", false)
	flush()
	series, _ := store.Series(context.Background(), "ws", "api", analytics.Minute, now, now.Add(time.Minute))
	if len(series) != 1 || series[0].Passed != 1 || series[0].Denied != 1 || series[0].ShadowDenied != 3 {
		t.Fatalf("series %v, want 1 passed, 1 denied, 3 shadow-denied", series)
	}
	top, _ := store.Top(context.Background(), "ws", "api", now, now.Add(time.Minute), 10)
	if fmt.Sprint(top) != "[{bob 0 1 0} {rollout 1 0 3}]" {
		t.Fatalf("top %v, want bob (denied) then rollout (1 passed, 3 shadow-denied)", top)
	}
}

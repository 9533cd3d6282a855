package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/regional"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// These tests run processes of one region on an in-memory regional store and drive
// their background work by hand (tick), on a fake clock: what the replay and
// refresh loop does, without waiting for it. Package redisstore runs the
// same processes, their loops running, on real Redis.

// regionalService is a limiter of one process of a region.
type regionalService struct {
	*Service
	reg *prometheus.Registry
}

func newRegional(t *testing.T, o store.Regional, clock Clock) *regionalService {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := New("test", WithClock(clock), WithRegionalStore(o), WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	return &regionalService{Service: s, reg: reg}
}

// tick runs one round of the replay and refresh loop.
func (r *regionalService) tick() {
	r.regional.Replay(context.Background())
	r.regional.RefreshStale(context.Background())
}

func cellOf(r Request, now int64) store.CellKey {
	return store.CellKey{Workspace: r.Workspace, Namespace: r.Namespace, Identifier: r.Identifier, Duration: r.Duration,
		Sequence: now / r.Duration.Milliseconds()}
}

// TestRegionalConvergence runs two processes of one region. What A accepted
// reaches the store with A's next replay; B, which has not seen the key,
// hydrates on its first request and admits only the rest.
func TestRegionalConvergence(t *testing.T) {
	o := storetest.NewMemRegional()
	clock := newFakeClock(600_000)
	a, b := newRegional(t, o, clock), newRegional(t, o, clock)
	rq := req("user", 10, time.Minute, 1)
	for i := 0; i < 6; i++ {
		if !mustLimit(t, a.Service, rq).Success {
			t.Fatalf("A denied request %d of 10", i)
		}
	}
	if got := o.Count(cellOf(rq, 600_000)); got != 0 {
		t.Fatalf("the store holds %d before A's replay, want 0: requests must not wait on it", got)
	}
	a.tick()
	if got := o.Count(cellOf(rq, 600_000)); got != 6 {
		t.Fatalf("the store holds %d after A's replay, want 6 (one command for six requests)", got)
	}
	admitted := 0
	for i := 0; i < 10; i++ {
		if mustLimit(t, b.Service, rq).Success {
			admitted++
		}
	}
	if admitted != 4 {
		t.Fatalf("B admitted %d after A spent 6 of 10, want 4", admitted)
	}
	b.tick()
	if got := o.Count(cellOf(rq, 600_000)); got != 10 {
		t.Fatalf("the store holds %d after B's replay, want 10", got)
	}
}

// TestWarmCellRefreshes: B already holds the cell when A spends the rest. B's
// first request after regional.FreshnessInterval still decides from memory but queues
// a background refresh; once it has run, B denies. After that denial B is
// strict and refreshes before deciding.
func TestWarmCellRefreshes(t *testing.T) {
	o := storetest.NewMemRegional()
	clock := newFakeClock(600_000)
	a, b := newRegional(t, o, clock), newRegional(t, o, clock)
	rq := req("user", 10, time.Minute, 1)
	if !mustLimit(t, b.Service, rq).Success {
		t.Fatal("B's first request denied")
	}
	b.tick()
	for i := 0; i < 9; i++ {
		mustLimit(t, a.Service, rq)
	}
	a.tick()
	clock.Advance(regional.FreshnessInterval)
	first := mustLimit(t, b.Service, rq) // stale: decided from memory, refresh queued
	if !first.Success {
		t.Fatalf("B's stale decision waited on the store: %+v", first)
	}
	b.tick() // the queued refresh runs
	if resp := mustLimit(t, b.Service, req("user", 10, time.Minute, 0)); resp.Remaining != 0 {
		t.Fatalf("B after its refresh: %+v, want 0 remaining", resp)
	}
	if resp := mustLimit(t, b.Service, rq); resp.Success {
		t.Fatalf("B admitted after its refresh: %+v", resp)
	}
	if got := testutil.ToFloat64(b.metrics.regional.StrictActivations); got != 1 {
		t.Fatalf("strict activations = %v, want 1", got)
	}
	// A strict window refreshes before deciding, at most once per
	// regional.StrictRefreshInterval, without waiting for the background loop.
	before := testutil.ToFloat64(b.metrics.regional.Ops.WithLabelValues(regional.OpStrict, regional.ResultOK))
	clock.Advance(regional.StrictRefreshInterval)
	mustLimit(t, b.Service, rq)
	mustLimit(t, b.Service, rq) // within the interval: no second read
	if got := testutil.ToFloat64(b.metrics.regional.Ops.WithLabelValues(regional.OpStrict, regional.ResultOK)) - before; got != 1 {
		t.Fatalf("strict refreshes = %v, want exactly 1 per interval", got)
	}
}

// TestRestartHydrates stops a process after it spent the whole limit and
// starts a new one: Run replays what is left before it returns, and the new
// process reads the cell from the store and does not admit again.
func TestRestartHydrates(t *testing.T) {
	o := storetest.NewMemRegional()
	clock := newFakeClock(600_000)
	a := newRegional(t, o, clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	rq := req("user", 5, time.Minute, 1)
	for i := 0; i < 5; i++ {
		mustLimit(t, a.Service, rq)
	}
	cancel()
	<-done
	if got := o.Count(cellOf(rq, 600_000)); got != 5 {
		t.Fatalf("the store holds %d after a clean stop, want 5", got)
	}
	restarted := newRegional(t, o, clock)
	if resp := mustLimit(t, restarted.Service, rq); resp.Success || resp.Remaining != 0 {
		t.Fatalf("the restarted process admitted: %+v", resp)
	}
	// Half a window later the previous process's count still weighs in.
	clock.Set(630_000)
	if resp := mustLimit(t, restarted.Service, rq); resp.Success {
		t.Fatalf("the restarted process forgot the spent budget: %+v", resp)
	}
}

// TestMultiLimitHydratesInOneRoundTrip sends a batch of cold keys: one store
// read for all of them. A batch that rolls back replays nothing.
func TestMultiLimitHydratesInOneRoundTrip(t *testing.T) {
	o := storetest.NewMemRegional()
	clock := newFakeClock(600_000)
	s := newRegional(t, o, clock)
	batch := []Request{req("a", 5, time.Minute, 1), req("b", 5, time.Second, 1), req("c", 5, time.Hour, 1)}
	if resp := mustMulti(t, s.Service, batch...); !resp.Passed {
		t.Fatalf("batch failed: %+v", resp)
	}
	if got := testutil.ToFloat64(s.metrics.regional.Ops.WithLabelValues(regional.OpCold, regional.ResultOK)); got != 1 {
		t.Fatalf("cold reads = %v, want 1 for the whole batch", got)
	}
	mustLimit(t, s.Service, req("full", 1, time.Minute, 1))
	if resp := mustMulti(t, s.Service, req("d", 5, time.Minute, 2), req("full", 1, time.Minute, 1)); resp.Passed {
		t.Fatal("batch with a full limit passed")
	}
	s.tick()
	if got := o.Count(cellOf(req("full", 1, time.Minute, 1), 600_000)); got != 1 {
		t.Fatalf("the store holds %d for the full key, want 1", got)
	}
	if got := o.Count(cellOf(req("d", 5, time.Minute, 2), 600_000)); got != 0 {
		t.Fatalf("a rolled-back increment reached the store: %d", got)
	}
}

// TestRegionalStoreDown: with the store failing every call, decisions go on from
// local state without error, what was accepted stays queued for the store
// and reaches it once it is back; one bad key (a partial failure) never
// holds back the others.
func TestRegionalStoreDown(t *testing.T) {
	mem := storetest.NewMemRegional()
	o := storetest.NewFaultyRegional(mem)
	clock := newFakeClock(600_000)
	s := newRegional(t, o, clock)
	warm := req("warm", 100, time.Minute, 1)
	mustLimit(t, s.Service, warm)
	s.tick()
	o.SetDown(true)
	const rounds = 8
	for round := range rounds {
		if resp := mustLimit(t, s.Service, warm); !resp.Success {
			t.Fatalf("round %d: warm key denied while the store is down: %+v", round, resp)
		}
		if resp := mustLimit(t, s.Service, req("cold"+itoa(int64(round)), 100, time.Minute, 1)); !resp.Success {
			t.Fatalf("round %d: cold key denied while the store is down: %+v", round, resp)
		}
		s.tick()
	}
	w := s.windows.Find(&cells.Key{Workspace: "ws", Namespace: "ns", Identifier: "warm", Period: period.OfLength(60_000)})
	cur, _, _ := w.CellsAt(10, false)
	if got := cur.Unreplayed.Load(); got != rounds {
		t.Fatalf("%d increments queued for the store, want the %d accepted while it was down", got, rounds)
	}
	o.SetDown(false)
	s.tick()
	if got := mem.Count(cellOf(warm, 600_000)); got != rounds+1 {
		t.Fatalf("the store holds %d for the warm key once back, want %d", got, rounds+1)
	}
	if got := testutil.ToFloat64(s.metrics.regional.Ops.WithLabelValues(regional.OpReplay, regional.ResultErr)); got < rounds {
		t.Fatalf("%v failed replays counted, want at least %d", got, rounds)
	}

	// A bad key: its increments fail alone and the other keys reach the
	// store.
	mem2 := storetest.NewMemRegional()
	o2 := storetest.NewFaultyRegional(mem2)
	p := newRegional(t, o2, clock)
	bad, good := req("bad", 100, time.Minute, 1), req("good", 100, time.Minute, 1)
	o2.SetBad(cellOf(bad, 600_000), true)
	for range rounds {
		mustLimit(t, p.Service, bad)
		mustLimit(t, p.Service, good)
		p.tick()
	}
	if got := mem2.Count(cellOf(good, 600_000)); got != rounds {
		t.Fatalf("the good key holds %d in the store, want %d", got, rounds)
	}
}

// TestOneServerDown: the store's cells live on several servers and one is
// down (a Redis Cluster master). Keys on the others converge exactly as
// before; the dead server's keys are decided locally, queued, and converge
// once it is back.
func TestOneServerDown(t *testing.T) {
	mem := storetest.NewMemRegional()
	o := storetest.NewFaultyRegional(mem)
	clock := newFakeClock(600_000)
	a, b := newRegional(t, o, clock), newRegional(t, o, clock)
	healthy, dead := req("healthy", 10, time.Minute, 10), req("dead", 10, time.Minute, 10)
	o.SetUnreachable("dead", true)
	for _, r := range []Request{healthy, dead} {
		if !mustLimit(t, a.Service, r).Success {
			t.Fatalf("A denied spending all of %s", r.Identifier)
		}
	}
	a.tick()
	if got := mem.Count(cellOf(healthy, 600_000)); got != 10 {
		t.Fatalf("the healthy key holds %d in the store, want 10", got)
	}
	// B reads both keys in one round trip: the healthy one is spent, the
	// dead server's is decided locally.
	resp := mustMulti(t, b.Service, req("healthy", 10, time.Minute, 0), req("dead", 10, time.Minute, 1))
	if resp.Results[0].Remaining != 0 || !resp.Results[1].Success {
		t.Fatalf("B with one server down: %+v, want the healthy key spent and the other decided locally", resp.Results)
	}
	if got := testutil.ToFloat64(b.metrics.regional.Ops.WithLabelValues(regional.OpCold, regional.ResultPartial)); got != 1 {
		t.Fatalf("partial reads = %v, want 1", got)
	}
	if _, got := b.regional.Pending(); got != 1 {
		t.Fatalf("%d windows queued for a background read, want the dead server's one", got)
	}
	o.SetUnreachable("dead", false)
	a.tick() // A's queued increment of the dead key lands
	b.tick() // B's background read finds it
	if mustLimit(t, b.Service, req("dead", 10, time.Minute, 1)).Success {
		t.Fatal("B admitted the key A spent once its server was back")
	}
}

// TestCorruptStoredValues: a cell the store reports at store.MaxCount (what
// redisstore reads from a value that is not a count, or sets after an
// overflow) denies with remaining within [0, limit].
func TestCorruptStoredValues(t *testing.T) {
	o := storetest.NewMemRegional()
	clock := newFakeClock(600_000)
	s := newRegional(t, o, clock)
	hot := req("hot", 10, time.Minute, 1)
	o.Set(cellOf(hot, 600_000), store.MaxCount)
	for range 3 {
		if resp := mustLimit(t, s.Service, hot); resp.Success || resp.Remaining != 0 {
			t.Fatalf("a cell at the stored-count cap: %+v, want denied with 0 remaining", resp)
		}
	}
	warm := req("warm", 10, time.Minute, 1)
	mustLimit(t, s.Service, warm)
	s.tick()
	o.Set(cellOf(warm, 600_000), store.MaxCount)
	clock.Advance(regional.MaxCopyAge)
	if resp := mustLimit(t, s.Service, warm); resp.Success || resp.Remaining < 0 || resp.Remaining > resp.Limit {
		t.Fatalf("a warm cell raised to the cap: %+v, want denied with remaining within [0, 10]", resp)
	}
}

// TestIdleCopyIsReadFirst: B holds a key, A spends 8 of its 10, and B's first
// request after an idle spell longer than regional.MaxCopyAge reads the store before
// deciding, so a cost of 3 is denied (11 of 10 before). A key with requests
// more often than regional.FreshnessInterval never waits: its refreshes run in the
// background.
func TestIdleCopyIsReadFirst(t *testing.T) {
	o := storetest.NewMemRegional()
	clock := newFakeClock(600_000)
	a, b := newRegional(t, o, clock), newRegional(t, o, clock)
	day := 24 * time.Hour
	if resp := mustLimit(t, b.Service, req("idle", 10, day, 0)); resp.Remaining != 10 {
		t.Fatalf("B's first read: %+v", resp)
	}
	for range 8 {
		mustLimit(t, a.Service, req("idle", 10, day, 1))
	}
	a.tick()
	clock.Advance(2 * time.Second)
	if resp := mustLimit(t, b.Service, req("idle", 10, day, 3)); resp.Success || resp.Remaining != 2 {
		t.Fatalf("B after 2 s idle: %+v, want denied with 2 remaining", resp)
	}
	if got := testutil.ToFloat64(b.metrics.regional.Ops.WithLabelValues(regional.OpAged, regional.ResultOK)); got != 1 {
		t.Fatalf("aged reads = %v, want 1", got)
	}

	// A hot key: a request every 400 ms for 10 s of clock refreshes in the
	// background only: once per 800 ms of clock (every second request finds
	// the copy older than 500 ms). The clock and the loop are driven by
	// hand, so the count is exact.
	hot := req("hot", 1_000_000, day, 1)
	mustLimit(t, b.Service, hot)
	for range 25 {
		clock.Advance(400 * time.Millisecond)
		mustLimit(t, b.Service, hot)
		b.tick()
	}
	if got := testutil.ToFloat64(b.metrics.regional.Ops.WithLabelValues(regional.OpAged, regional.ResultOK)); got != 1 {
		t.Fatalf("aged reads after the hot key = %v, want still 1", got)
	}
	if got := testutil.ToFloat64(b.metrics.regional.Ops.WithLabelValues(regional.OpStale, regional.ResultOK)); got != 12 {
		t.Fatalf("background refreshes of the hot key = %v, want 12 (one per 800 ms of clock)", got)
	}
}

// TestStoreBackEmptyIsReseeded: with 80 of 100 spent (40 by A, 40 by B,
// who read A's first) and replayed, the regional store loses its data (a
// Redis restarted without persistence). The processes write back what they
// know, by max-merge: A (which knows its own 40) on its next increment of
// the cell, B (which knows all 80) on its next read of it, once its copy
// aged. A process that never saw the key (C) then admits what is left of
// 80, so the region admits 21 after the loss instead of 100: A's one
// increment between the loss and B's re-seed is the only count lost, since
// a max-merge cannot tell whether B's 80 held it.
func TestStoreBackEmptyIsReseeded(t *testing.T) {
	o := storetest.NewMemRegional()
	clock := newFakeClock(600_000)
	a, b := newRegional(t, o, clock), newRegional(t, o, clock)
	rq := req("user", 100, time.Hour, 40)
	mustLimit(t, a.Service, rq)
	a.tick()
	mustLimit(t, b.Service, rq) // hydrates A's 40, then spends 40
	b.tick()
	cell := cellOf(rq, 600_000)
	if got := o.Count(cell); got != 80 {
		t.Fatalf("the store holds %d, want 80", got)
	}
	o.Set(cell, 0) // back empty

	rq.Cost = 1
	mustLimit(t, a.Service, rq) // A decides from memory, and replays with its floor
	a.tick()
	if got := o.Count(cell); got != 41 {
		t.Fatalf("the store holds %d after A's next increment, want A's 40 and 1", got)
	}
	clock.Set(600_000 + regional.MaxCopyAge.Milliseconds())
	peek := rq
	peek.Cost = 0
	mustLimit(t, b.Service, peek) // B's copy aged: it reads the store first
	b.tick()
	if got := o.Count(cell); got != 80 {
		t.Fatalf("the store holds %d after B's read, want B's 80 (max-merged, not summed)", got)
	}
	c := newRegional(t, o, clock)
	admitted := int64(0)
	for range 100 {
		if mustLimit(t, c.Service, rq).Success {
			admitted++
		}
	}
	if admitted != 20 {
		t.Fatalf("a process new to the key admitted %d after the store came back, want the 20 left of B's 80", admitted)
	}
}

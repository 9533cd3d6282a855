package redisstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// The tests of this file run limiters on real Redis through their exported
// API, their background loops running on the wall clock: what the
// limiter's own tests show on an in-memory store, shown on the real one.

// process is one limiter process of a region with its loops running.
type process struct {
	*ratelimit.Service
	reg  *prometheus.Registry
	stop func()
}

// startProcess starts a limiter on c with its loops running, stopped when
// the test ends (or by stop, which replays what is left first).
func startProcess(t testing.TB, c redis.UniversalClient, opts ...ratelimit.Option) *process {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := ratelimit.New("test", append([]ratelimit.Option{ratelimit.WithRegionalStore(newStore(t, c, WithRegisterer(reg))), ratelimit.WithRegisterer(reg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	var once sync.Once
	p := &process{Service: s, reg: reg, stop: func() { once.Do(func() { cancel(); <-done }) }}
	t.Cleanup(p.stop)
	return p
}

// metric returns the value of the first sample of the metric name whose
// labels include labels (name, value pairs), or 0.
func (p *process) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
				}
				if !found {
					continue metrics
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// month is the window of the tests on the wall clock: no window boundary
// falls between two steps of a test.
const month = ratelimit.MaxDuration

func request(id string, limit, cost int64) ratelimit.Request {
	return ratelimit.Request{Workspace: "ws", Namespace: "ns", Identifier: id, Limit: limit, Duration: month, Cost: cost}
}

func decide(t testing.TB, s *ratelimit.Service, r ratelimit.Request) ratelimit.Response {
	t.Helper()
	resp, err := s.Limit(context.Background(), r)
	if err != nil {
		t.Fatalf("Limit(%+v): %v", r, err)
	}
	return resp
}

// stored returns what Redis holds for r's current cell.
func stored(t testing.TB, c redis.UniversalClient, r ratelimit.Request) int64 {
	t.Helper()
	cell := store.CellKey{Workspace: r.Workspace, Namespace: r.Namespace, Identifier: r.Identifier, Duration: r.Duration,
		Sequence: time.Now().UnixMilli() / r.Duration.Milliseconds()}
	counts, err := newStore(t, c).Load(context.Background(), []store.CellKey{cell})
	if err != nil {
		t.Fatal(err)
	}
	return counts[0]
}

// TestTwoProcessesOneRedis: what A accepted reaches Redis within a few replay
// intervals; B, which has not seen the key, reads it on its first request and
// admits only the rest. A process started after A stopped reads the spent
// budget back and admits nothing. On one server and on a cluster.
func TestTwoProcessesOneRedis(t *testing.T) {
	for _, backend := range []string{"redis", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			c := startBackend(t, backend)
			a, b := startProcess(t, c), startProcess(t, c)
			rq := request("user", 10, 1)
			for i := range 6 {
				if !decide(t, a.Service, rq).Success {
					t.Fatalf("A denied request %d of 10", i)
				}
			}
			poll.Until(t, 5*time.Second, "A's replay", func() bool { return stored(t, c, rq) == 6 })
			admitted := 0
			for range 10 {
				if decide(t, b.Service, rq).Success {
					admitted++
				}
			}
			if admitted != 4 {
				t.Fatalf("B admitted %d after A spent 6 of 10, want 4", admitted)
			}
			b.stop() // Run replays what is left before it returns
			if got := stored(t, c, rq); got != 10 {
				t.Fatalf("Redis holds %d after B's clean stop, want 10", got)
			}
			restarted := startProcess(t, c)
			if resp := decide(t, restarted.Service, rq); resp.Success || resp.Remaining != 0 {
				t.Fatalf("a process started afterwards admitted: %+v", resp)
			}
		})
	}
}

// TestFailureUnderLoad kills Redis (and, separately, freezes it) under load
// from two processes. No request fails or waits much longer than the store
// timeout, the breaker opens, and once Redis is back the retried replays
// bring it up to at least what was accepted.
func TestFailureUnderLoad(t *testing.T) {
	for _, fault := range []string{"kill", "freeze"} {
		t.Run(fault, func(t *testing.T) {
			r := testserver.StartRedis(t)
			c := client(t, r)
			procs := []*process{startProcess(t, c), startProcess(t, c)}
			const keys = 20
			var admitted [keys]atomic.Int64
			var slowest, requests atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						k := (g*7 + i) % keys
						id := "k" + strconv.Itoa(k)
						if i%50 == 0 {
							// A key no process has seen: its first request
							// reads Redis, the call that may wait.
							k, id = -1, "cold-"+strconv.Itoa(g)+"-"+strconv.Itoa(i)
						}
						start := time.Now()
						resp, err := procs[i%2].Limit(context.Background(), request(id, 1_000_000, 1))
						took := time.Since(start)
						requests.Add(1)
						if err != nil {
							t.Errorf("request failed: %v", err)
							return
						}
						if resp.Success && k >= 0 {
							admitted[k].Add(1)
						}
						for old := slowest.Load(); int64(took) > old && !slowest.CompareAndSwap(old, int64(took)); old = slowest.Load() {
						}
						time.Sleep(200 * time.Microsecond)
					}
				})
			}
			breaker := func(state float64) func() bool {
				return func() bool {
					return procs[0].metric(t, "unkey_ratelimit_origin_breaker_state") == state &&
						procs[1].metric(t, "unkey_ratelimit_origin_breaker_state") == state
				}
			}
			strike, repair := r.Kill, r.Start
			if fault == "freeze" {
				strike, repair = r.Freeze, r.Thaw
			}
			time.Sleep(300 * time.Millisecond)
			strike()
			poll.Until(t, 5*time.Second, "the breakers to open", breaker(2))
			time.Sleep(500 * time.Millisecond)
			repair()
			poll.Until(t, 5*time.Second, "the breakers to close", breaker(0))
			time.Sleep(200 * time.Millisecond)
			close(stop)
			wg.Wait()
			t.Logf("%d requests, slowest %v", requests.Load(), time.Duration(slowest.Load()))
			// The slack covers a loaded CI machine's scheduling; a request
			// that waited on the dead store without a timeout would hang.
			if d := time.Duration(slowest.Load()); d > store.RequestTimeout+700*time.Millisecond {
				t.Errorf("a request waited %v, longer than the store's request timeout %v (plus 700 ms of scheduling slack)", d, store.RequestTimeout)
			}
			// Nothing accepted is lost. A replay whose answer was lost may
			// have been applied and is sent again (counting twice is
			// preferred to losing a count), so Redis may hold a little more.
			var accepted, inRedis int64
			for k := range keys {
				rq := request("k"+strconv.Itoa(k), 1, 1)
				poll.Until(t, 5*time.Second, "Redis to catch up", func() bool { return stored(t, c, rq) >= admitted[k].Load() })
				accepted += admitted[k].Load()
				inRedis += stored(t, c, rq)
			}
			t.Logf("accepted %d, Redis holds %d (%d counted twice after lost answers)", accepted, inRedis, inRedis-accepted)
			for _, p := range procs {
				if got := p.metric(t, "unkey_ratelimit_origin_replay_expired_total"); got != 0 {
					t.Errorf("%v accepted units expired unreplayed", got)
				}
			}
		})
	}
}

// TestCorruptValuesInDecisions: a cell whose Redis value is huge, negative or
// not a number never admits past the limit and never reports remaining
// outside [0, limit]; an increment that would overflow leaves the breaker
// closed, so other keys keep converging.
func TestCorruptValuesInDecisions(t *testing.T) {
	r := testserver.StartRedis(t)
	c := client(t, r)
	a, b := startProcess(t, c), startProcess(t, c)
	check := func(who string, resp ratelimit.Response, wantSuccess bool) {
		t.Helper()
		if resp.Success != wantSuccess || resp.Remaining < 0 || resp.Remaining > resp.Limit {
			t.Fatalf("%s: %+v, want success %v and remaining within [0, %d]", who, resp, wantSuccess, resp.Limit)
		}
	}
	set := func(rq ratelimit.Request, v string) {
		t.Helper()
		cell := store.CellKey{Workspace: rq.Workspace, Namespace: rq.Namespace, Identifier: rq.Identifier, Duration: rq.Duration,
			Sequence: time.Now().UnixMilli() / rq.Duration.Milliseconds()}
		if _, err := r.Do("SET", Key(&cell), v); err != nil {
			t.Fatal(err)
		}
	}
	hot := request("hot", 10, 1)
	set(hot, "9223372036854775000")
	for range 3 {
		check("huge cell", decide(t, a.Service, hot), false)
	}
	warm := request("warm", 10, 1)
	check("warm", decide(t, a.Service, warm), true)
	poll.Until(t, 5*time.Second, "warm replay", func() bool { return stored(t, c, warm) == 1 })
	set(warm, "9223372036854775807")
	for range 5 {
		decide(t, a.Service, warm) // each replay of these would overflow
		time.Sleep(20 * time.Millisecond)
	}
	spent := request("spent", 3, 1)
	for range 3 {
		check("B spends", decide(t, b.Service, spent), true)
	}
	poll.Until(t, 5*time.Second, "B's replay", func() bool { return stored(t, c, spent) == 3 })
	check("A on a key spent in Redis", decide(t, a.Service, spent), false)
	if got := a.metric(t, "unkey_ratelimit_origin_breaker_state"); got != 0 {
		t.Fatalf("breaker state %v after one corrupt key, want 0 (closed)", got)
	}
	check("warm after overflow", decide(t, a.Service, warm), false)
	neg, junk := request("negative", 2, 1), request("junk", 2, 1)
	set(neg, "-1000")
	set(junk, "not-a-count")
	check("negative 1", decide(t, a.Service, neg), true)
	check("negative 2", decide(t, a.Service, neg), true)
	check("negative 3", decide(t, a.Service, neg), false)
	check("junk", decide(t, a.Service, junk), false)
}

// TestFaultsOverRedis runs the limiter's regional fault cases with
// storetest's fault wrapper around the real store, on one server and on a
// cluster: with the store down, decisions go on and what was accepted
// reaches Redis once it is back; a bad cell holds back none of the others;
// an unreachable identifier's keys are decided locally and converge once
// reachable, while the others converge as before.
func TestFaultsOverRedis(t *testing.T) {
	for _, backend := range []string{"redis", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			c := startBackend(t, backend)
			faulty := storetest.NewFaultyRegional(newStore(t, c))
			a := startProcess(t, c, ratelimit.WithRegionalStore(faulty))
			b := startProcess(t, c, ratelimit.WithRegionalStore(faulty))

			warm := request("warm", 100, 1)
			decide(t, a.Service, warm)
			poll.Until(t, 5*time.Second, "the first replay", func() bool { return stored(t, c, warm) == 1 })
			faulty.SetDown(true)
			for i := range 5 {
				if !decide(t, a.Service, warm).Success {
					t.Fatalf("request %d denied with the store down", i)
				}
			}
			poll.Until(t, 5*time.Second, "a replay to fail", func() bool {
				return a.metric(t, "unkey_ratelimit_origin_operations_total", "op", "replay", "result", "error") >= 1
			})
			if got := stored(t, c, warm); got != 1 {
				t.Fatalf("Redis holds %d with the store down, want 1", got)
			}
			faulty.SetDown(false)
			poll.Until(t, 5*time.Second, "the queued increments once the store is back", func() bool { return stored(t, c, warm) == 6 })

			bad, good := request("bad", 100, 1), request("good", 100, 1)
			badCell := store.CellKey{Workspace: bad.Workspace, Namespace: bad.Namespace, Identifier: bad.Identifier,
				Duration: bad.Duration, Sequence: time.Now().UnixMilli() / bad.Duration.Milliseconds()}
			faulty.SetBad(badCell, true)
			for range 3 {
				decide(t, a.Service, bad)
				decide(t, a.Service, good)
			}
			poll.Until(t, 5*time.Second, "the good key beside a bad one", func() bool { return stored(t, c, good) == 3 })
			if got := stored(t, c, bad); got != 0 {
				t.Fatalf("the bad cell holds %d, want its increments refused", got)
			}
			faulty.SetBad(badCell, false)
			poll.Until(t, 5*time.Second, "the bad key once repaired", func() bool { return stored(t, c, bad) == 3 })

			healthy, dead := request("healthy", 10, 10), request("dead", 10, 10)
			faulty.SetUnreachable("dead", true)
			decide(t, a.Service, healthy)
			decide(t, a.Service, dead)
			poll.Until(t, 5*time.Second, "the healthy key", func() bool { return stored(t, c, healthy) == 10 })
			if resp := decide(t, b.Service, request("healthy", 10, 1)); resp.Success {
				t.Fatalf("B admitted the healthy key A spent: %+v", resp)
			}
			if resp := decide(t, b.Service, request("dead", 10, 0)); !resp.Success || resp.Remaining != 10 {
				t.Fatalf("B on the unreachable key: %+v, want a local decision", resp)
			}
			faulty.SetUnreachable("dead", false)
			poll.Until(t, 5*time.Second, "the unreachable key once reachable", func() bool { return stored(t, c, dead) == 10 })
			poll.Until(t, 5*time.Second, "B to see it", func() bool { return !decide(t, b.Service, request("dead", 10, 1)).Success })
		})
	}
}

// TestRedisBackEmpty: with 80 of 100 spent by three processes and replayed,
// Redis is killed and comes back without its data. The processes write
// back what they know of the cell (the regional count's own max-merge), so
// that the region admits about what was left, not a second limit (before:
// 89 more, 169 in all).
func TestRedisBackEmpty(t *testing.T) {
	r := testserver.StartRedis(t)
	c := client(t, r)
	var replayed atomic.Int64 // the increments whose replays Redis answered
	procs := make([]*process, 3)
	for i := range procs {
		procs[i] = startProcess(t, c, ratelimit.WithRegionalStore(&replayCounter{Regional: newStore(t, c), replayed: &replayed}))
	}
	rq := request("user", 100, 40)
	spent := int64(0)
	for i, p := range procs {
		decide(t, p.Service, rq) // hydrates what the ones before spent
		spent += rq.Cost
		poll.Until(t, 5*time.Second, "the replay of process "+strconv.Itoa(i), func() bool { return stored(t, c, rq) == spent })
		rq.Cost = 20
	}
	r.Kill()
	r.StartEmpty()
	rq.Cost = 1
	admitted := 0
	deadline := time.Now().Add(poll.Scaled(20 * time.Second))
	for denials := 0; denials < 60 && time.Now().Before(deadline); {
		before := replayed.Load()
		round := int64(0)
		for _, p := range procs {
			if decide(t, p.Service, rq).Success {
				admitted++
				round++
				denials = 0
			} else {
				denials++
			}
		}
		// Each round waits for its admissions' replays to be answered, as
		// an idle machine's replay loop (every 10 ms) answers them between
		// rounds: on a loaded one a fixed pause let the processes decide
		// several rounds on what they held before they heard from Redis.
		poll.Until(t, 5*time.Second, "the round's replays", func() bool { return replayed.Load() >= before+round })
	}
	t.Logf("admitted %d after Redis came back empty; Redis holds %d", admitted, stored(t, c, rq))
	// 20 were left. Beyond them: in the first round the processes that
	// held less (40 and 60) replay floors below the one that held 80 and
	// may hear those back, so each admits once more before it hears 80; in
	// the last round every process but one may admit the last unit. So at
	// most 20 + 2·(3−1) = 24 (measured under -race with six busy loops on
	// two cores: 22 to 24 in 20 runs); a region that forgot the 80 would
	// admit up to the whole limit again.
	if limit := 20 + 2*(len(procs)-1); admitted > limit {
		t.Fatalf("the region admitted %d after Redis came back empty with 80 of 100 spent, want at most %d", admitted, limit)
	}
	if got := stored(t, c, rq); got < 100 {
		t.Fatalf("Redis holds %d at the end, want the region's count re-seeded (at least 100)", got)
	}
}

// replayCounter counts the increments of the replays the store answered.
type replayCounter struct {
	store.Regional
	replayed *atomic.Int64
}

func (r *replayCounter) Increment(ctx context.Context, incs []store.Increment) ([]int64, error) {
	counts, err := r.Regional.Increment(ctx, incs)
	for i, n := range counts {
		if n >= 0 {
			r.replayed.Add(incs[i].Delta)
		}
	}
	return counts, err
}

// TestBusyCellCountsExactly: eight goroutines of two processes admit on
// one key while the replays run; once they are done Redis holds exactly
// what was admitted. A replay's floor (see store.Increment.Floor) must
// never count a request twice, though it raises an empty store.
func TestBusyCellCountsExactly(t *testing.T) {
	c := client(t, testserver.StartRedis(t))
	procs := []*process{startProcess(t, c), startProcess(t, c)}
	rq := request("busy", 1<<40, 1)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 2000 {
				if decide(t, procs[g%2].Service, rq).Success {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	poll.Until(t, 5*time.Second, "the last replays", func() bool { return stored(t, c, rq) >= admitted.Load() })
	time.Sleep(50 * time.Millisecond) // a few replay intervals more: nothing may follow
	if got := stored(t, c, rq); got != admitted.Load() {
		t.Fatalf("Redis holds %d for %d admitted", got, admitted.Load())
	}
}

// markedCells counts the members of the index of marked cells.
func markedCells(t testing.TB, c redis.UniversalClient) int64 {
	t.Helper()
	var n int64
	for _, k := range indexKeys {
		m, err := c.ZCard(context.Background(), k).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		n += m
	}
	return n
}

// TestIndexDrainsOnRedis: on a real Redis, the index of marked cells that
// one-request windows fill is empty soon after they go idle: a full flush
// drains it in rounds (TestFullFlushDrainsTheIndex shows the rounds; here,
// the real index). Before, a full flush read 1,000 marks: filled at
// request rate, drained at ~100 a second per process, 300,000
// one-request windows left 269,130 marks (54 MB) after every cell expired.
func TestIndexDrainsOnRedis(t *testing.T) {
	c := startBackend(t, "redis")
	p := startProcess(t, c, ratelimit.WithGlobalStore(storetest.NewMemGlobal()),
		ratelimit.WithGlobalFlushIntervals(200*time.Millisecond, time.Second))
	for i := range 5_000 {
		decide(t, p.Service, ratelimit.Request{Workspace: "ws", Namespace: "ns", Identifier: strconv.Itoa(i), Limit: 1,
			Duration: time.Second, Cost: 1})
	}
	filled := time.Now()
	poll.Until(t, 10*time.Second, "marks in the index", func() bool { return markedCells(t, c) > 0 })
	poll.Until(t, time.Minute, "the index to drain", func() bool { return markedCells(t, c) == 0 })
	t.Logf("index empty %v after 5,000 one-request windows were made", time.Since(filled).Round(100*time.Millisecond))
}

// TestReleaseGivesBackOnceOverRedis: two processes on real Redis (one
// server and a cluster), a concurrency limit of 2. A takes both slots and
// releases one while Redis applies the release and its answer comes too
// late (or Redis applies it twice); once A's replay loop has run, B takes
// exactly one slot. Before releases were totals per process, the release
// answered late was replayed and freed a second slot: B took two, 3 held
// against 2.
func TestReleaseGivesBackOnceOverRedis(t *testing.T) {
	for _, backend := range []string{"redis", "cluster"} {
		for name, fault := range map[string]storetest.WriteFault{"late": storetest.WriteLate, "twice": storetest.WriteTwice} {
			t.Run(backend+"/"+name, func(t *testing.T) {
				c, faulty, a, b := twoOnFaultyRedis(t, backend)
				ctx := context.Background()
				acq := ratelimit.Acquisition{Workspace: "ws", Namespace: "ns", Identifier: "pool", Limit: 2, Lease: time.Hour, Cost: 1}
				var slots []ratelimit.Slot
				for range 2 {
					// A take that a loaded machine answers too late counts
					// its slot beside the store's until A's replay writes
					// its total: the next is refused until then.
					var resp ratelimit.Response
					poll.Until(t, 5*time.Second, "A's acquisition", func() bool {
						var err error
						resp, err = a.Acquire(ctx, acq)
						if err != nil {
							t.Fatal(err)
						}
						return resp.Success
					})
					slots = append(slots, ratelimit.Slot{Workspace: "ws", Namespace: "ns", Identifier: "pool", Limit: 2,
						Lease: time.Hour, Sequence: ratelimit.LeaseCell(resp, time.Hour), Cost: 1})
				}
				refunds := slotCell(slots[0])
				refunds.Refunds = true
				faulty.SetWriteFault(func(k store.CellKey) storetest.WriteFault {
					if k == refunds {
						return fault
					}
					return storetest.WriteOK
				})
				replays := func() float64 {
					return a.metric(t, "unkey_ratelimit_origin_operations_total", "op", "replay", "result", "ok")
				}
				before := replays()
				if freed, err := a.Release(ctx, slots[0]); err != nil || freed.Given != 1 {
					t.Fatalf("release: %+v, %v", freed, err)
				}
				faulty.SetWriteFault(nil)
				if fault == storetest.WriteLate {
					// Answered as failed: A's replay sends it again.
					poll.Until(t, 5*time.Second, "A's replay of the release", func() bool { return replays() > before })
				}
				counts, err := newStore(t, c).Load(ctx, []store.CellKey{refunds})
				if err != nil || counts[0] != 1 {
					t.Fatalf("Redis holds %v released slots (%v), want 1", counts, err)
				}
				taken := acquireUpTo(t, b, acq, 2)
				if taken != 1 {
					t.Fatalf("B took %d slots after A held 2 and released 1: %d held against 2", taken, 1+taken)
				}
			})
		}
	}
}

// TestAcquireCountsOnceOverRedis: two processes on real Redis (one server
// and a cluster), a concurrency limit of 2. A's acquisition is applied by
// Redis and its answer comes too late (or Redis applies it twice); A reads
// the pool with its writer's total, which holds the take: answered taken.
// Redis counts A's slot once, and B takes exactly one. Before a take was
// its writer's total, the take answered late was counted again from
// memory and replayed: a slot held by no one, and B took none.
func TestAcquireCountsOnceOverRedis(t *testing.T) {
	for _, backend := range []string{"redis", "cluster"} {
		for name, fault := range map[string]storetest.WriteFault{"late": storetest.WriteLate, "twice": storetest.WriteTwice} {
			t.Run(backend+"/"+name, func(t *testing.T) {
				c, faulty, a, b := twoOnFaultyRedis(t, backend)
				ctx := context.Background()
				acq := ratelimit.Acquisition{Workspace: "ws", Namespace: "ns", Identifier: "pool", Limit: 2, Lease: time.Hour, Cost: 1}
				faulty.SetWriteFault(func(k store.CellKey) storetest.WriteFault {
					if !k.Refunds {
						return fault
					}
					return storetest.WriteOK
				})
				resp, err := a.Acquire(ctx, acq)
				faulty.SetWriteFault(nil)
				if err != nil || !resp.Success {
					t.Fatalf("A's acquisition: %+v, %v", resp, err)
				}
				cell := slotCell(ratelimit.Slot{Workspace: "ws", Namespace: "ns", Identifier: "pool", Lease: time.Hour,
					Sequence: ratelimit.LeaseCell(resp, time.Hour)})
				counts, err := newStore(t, c).Load(ctx, []store.CellKey{cell})
				if err != nil || counts[0] != 1 {
					t.Fatalf("Redis counts %v slots (%v), want A's 1", counts, err)
				}
				taken := acquireUpTo(t, b, acq, 2)
				if taken != 1 {
					t.Fatalf("B took %d slots while A held 1 of 2", taken)
				}
			})
		}
	}
}

// twoOnFaultyRedis starts a backend (see startBackend) and two processes on
// it, A and B, whose regional store is one fault wrapper around it.
func twoOnFaultyRedis(t *testing.T, backend string) (redis.UniversalClient, *storetest.FaultyRegional, *process, *process) {
	c := startBackend(t, backend)
	faulty := storetest.NewFaultyRegional(newStore(t, c))
	return c, faulty, startProcess(t, c, ratelimit.WithRegionalStore(faulty)), startProcess(t, c, ratelimit.WithRegionalStore(faulty))
}

// acquireUpTo makes n acquisitions of acq on p and returns how many took
// slots.
func acquireUpTo(t *testing.T, p *process, acq ratelimit.Acquisition, n int) int {
	t.Helper()
	taken := 0
	for range n {
		resp, err := p.Acquire(context.Background(), acq)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Success {
			taken++
		}
	}
	return taken
}

// slotCell returns the store's key of the cell sl is counted in.
func slotCell(sl ratelimit.Slot) store.CellKey {
	shift := store.PoolShift(sl.Lease.Milliseconds())
	return store.CellKey{Workspace: sl.Workspace, Namespace: sl.Namespace, Identifier: sl.Identifier,
		Duration: time.Duration(store.PoolCode(shift, sl.Sequence)) * time.Millisecond, Sequence: sl.Sequence}
}

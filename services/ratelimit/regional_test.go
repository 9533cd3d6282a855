package ratelimit

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/unkeyed/ratelimit/internal/poll"
	"github.com/unkeyed/ratelimit/internal/testserver"
)

// regionalService is a limiter of one process of a region, running its
// background loops against a real Redis.
type regionalService struct {
	*Service
	reg    *prometheus.Registry
	client *redis.Client
	stop   func()
}

func startRegional(t *testing.T, r *testserver.Redis, clock Clock) *regionalService {
	t.Helper()
	opts, err := RedisOptions(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	reg := prometheus.NewRegistry()
	s, err := New("test", WithClock(clock), WithOrigin(NewRedisOrigin(client)), WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	rs := &regionalService{Service: s, reg: reg, client: client}
	var once sync.Once
	rs.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			client.Close()
		})
	}
	t.Cleanup(rs.stop)
	return rs
}

// redisCount reads a cell's count straight from Redis.
func redisCount(t *testing.T, r *testserver.Redis, c Cell) int64 {
	t.Helper()
	v, err := r.Do("GET", RedisKey(&c))
	if err != nil {
		t.Fatal(err)
	}
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// eventually polls cond every 5 ms for up to 5 s.
func cellOf(r Request, now int64) Cell {
	return Cell{Workspace: r.Workspace, Namespace: r.Namespace, Identifier: r.Identifier, Duration: r.Duration,
		Sequence: now / r.Duration.Milliseconds()}
}

func TestRedisKeysNeverCollide(t *testing.T) {
	pairs := [][2]Cell{
		{{Workspace: "w", Namespace: "a-b", Identifier: "c"}, {Workspace: "w", Namespace: "a", Identifier: "b-c"}},
		{{Workspace: "w", Namespace: "a:1:b", Identifier: "c"}, {Workspace: "w", Namespace: "a", Identifier: "1:b:c"}},
		{{Workspace: "w:1:a", Namespace: "b", Identifier: "c"}, {Workspace: "w", Namespace: "1:a:b", Identifier: "c"}},
		{{Workspace: "w", Namespace: "n", Identifier: "i:60000:5", Duration: time.Second, Sequence: 1},
			{Workspace: "w", Namespace: "n", Identifier: "i", Duration: time.Minute, Sequence: 5}},
	}
	r := testserver.StartRedis(t)
	opts, _ := RedisOptions(r.URL())
	client := redis.NewClient(opts)
	defer client.Close()
	o := NewRedisOrigin(client)
	ctx := context.Background()
	for _, p := range pairs {
		if RedisKey(&p[0]) == RedisKey(&p[1]) {
			t.Fatalf("%+v and %+v share the key %q", p[0], p[1], RedisKey(&p[0]))
		}
		if _, err := o.Increment(ctx, []Increment{{Cell: p[0], Delta: 3, TTL: time.Minute}, {Cell: p[1], Delta: 5, TTL: time.Minute}}); err != nil {
			t.Fatal(err)
		}
		counts, err := o.Load(ctx, []Cell{p[0], p[1]})
		if err != nil {
			t.Fatal(err)
		}
		if counts[0] != 3 || counts[1] != 5 {
			t.Fatalf("%+v / %+v hold %v in Redis, want [3 5]", p[0], p[1], counts)
		}
	}
}

func TestRedisIncrementSetsTTLAtomically(t *testing.T) {
	r := testserver.StartRedis(t)
	opts, _ := RedisOptions(r.URL())
	client := redis.NewClient(opts)
	defer client.Close()
	o := NewRedisOrigin(client)
	c := Cell{Workspace: "w", Namespace: "n", Identifier: "i", Duration: time.Minute, Sequence: 7}
	counts, err := o.Increment(context.Background(), []Increment{{Cell: c, Delta: 2, TTL: 90 * time.Second}})
	if err != nil || counts[0] != 2 {
		t.Fatalf("Increment = %v, %v; want [2]", counts, err)
	}
	// A later increment with a shorter TTL never shortens the expiry.
	if _, err := o.Increment(context.Background(), []Increment{{Cell: c, Delta: 1, TTL: time.Second}}); err != nil {
		t.Fatal(err)
	}
	pttl, err := r.Do("PTTL", RedisKey(&c))
	if err != nil {
		t.Fatal(err)
	}
	if ms, _ := strconv.Atoi(pttl); ms <= 80_000 || ms > 90_000 {
		t.Fatalf("PTTL = %s ms, want about 90,000", pttl)
	}
	missing, err := o.Load(context.Background(), []Cell{{Workspace: "w", Namespace: "n", Identifier: "nobody", Duration: time.Minute}})
	if err != nil || missing[0] != 0 {
		t.Fatalf("Load of a missing cell = %v, %v; want [0]", missing, err)
	}
}

// TestRegionalConvergence runs two processes of one region on one Redis.
// What A accepted reaches Redis within a few replay intervals; B, which has
// not seen the key, hydrates on its first request and admits only the rest.
func TestRegionalConvergence(t *testing.T) {
	r := testserver.StartRedis(t)
	clock := newFakeClock(600_000)
	a, b := startRegional(t, r, clock), startRegional(t, r, clock)
	rq := req("user", 10, time.Minute, 1)
	for i := 0; i < 6; i++ {
		if !mustLimit(t, a.Service, rq).Success {
			t.Fatalf("A denied request %d of 10", i)
		}
	}
	start := time.Now()
	poll.Until(t, 5*time.Second, "A's replay", func() bool { return redisCount(t, r, cellOf(rq, 600_000)) == 6 })
	t.Logf("A's 6 accepted requests reached Redis after %v (replay interval %v)", time.Since(start), replayInterval)
	admitted := 0
	for i := 0; i < 10; i++ {
		if mustLimit(t, b.Service, rq).Success {
			admitted++
		}
	}
	if admitted != 4 {
		t.Fatalf("B admitted %d after A spent 6 of 10, want 4", admitted)
	}
	poll.Until(t, 5*time.Second, "B's replay", func() bool { return redisCount(t, r, cellOf(rq, 600_000)) == 10 })
}

// TestWarmCellRefreshes: B already holds the cell when A spends the rest. B's
// first request after freshnessInterval still decides from memory but starts
// a background refresh; once it lands, B denies. After that denial B is
// strict and refreshes before deciding.
func TestWarmCellRefreshes(t *testing.T) {
	r := testserver.StartRedis(t)
	clock := newFakeClock(600_000)
	a, b := startRegional(t, r, clock), startRegional(t, r, clock)
	rq := req("user", 10, time.Minute, 1)
	if !mustLimit(t, b.Service, rq).Success {
		t.Fatal("B's first request denied")
	}
	for i := 0; i < 9; i++ {
		mustLimit(t, a.Service, rq)
	}
	poll.Until(t, 5*time.Second, "replays", func() bool { return redisCount(t, r, cellOf(rq, 600_000)) == 10 })
	clock.Advance(freshnessInterval)
	first := mustLimit(t, b.Service, rq) // stale: decided from memory, refresh queued
	poll.Until(t, 5*time.Second, "B's background refresh", func() bool {
		return mustLimit(t, b.Service, req("user", 10, time.Minute, 0)).Remaining == 0
	})
	if resp := mustLimit(t, b.Service, rq); resp.Success {
		t.Fatalf("B admitted after its refresh: %+v", resp)
	}
	admittedOver := 0
	if first.Success {
		admittedOver = 1 // the one stale decision the freshness interval allows
	}
	t.Logf("requests admitted over the limit while B was stale: %d", admittedOver)
	if got := testutil.ToFloat64(b.metrics.strictActivations); got != 1 {
		t.Fatalf("strict activations = %v, want 1", got)
	}
	// A strict window refreshes before deciding: A's next window... here A
	// spends one more in the same cell; B, strict, sees it on its next
	// decision once strictRefreshInterval has passed, without waiting for the
	// background loop.
	before := testutil.ToFloat64(b.metrics.originOps.WithLabelValues(opStrict, resultOK))
	clock.Advance(strictRefreshInterval)
	mustLimit(t, b.Service, rq)
	mustLimit(t, b.Service, rq) // within the interval: no second read
	if got := testutil.ToFloat64(b.metrics.originOps.WithLabelValues(opStrict, resultOK)) - before; got != 1 {
		t.Fatalf("strict refreshes = %v, want exactly 1 per interval", got)
	}
}

// TestRestartHydrates stops a process after it spent the whole limit and
// starts a new one: it reads the cell from Redis and does not admit again.
func TestRestartHydrates(t *testing.T) {
	r := testserver.StartRedis(t)
	clock := newFakeClock(600_000)
	a := startRegional(t, r, clock)
	rq := req("user", 5, time.Minute, 1)
	for i := 0; i < 5; i++ {
		mustLimit(t, a.Service, rq)
	}
	a.stop() // Run replays what is left before it returns
	if got := redisCount(t, r, cellOf(rq, 600_000)); got != 5 {
		t.Fatalf("Redis holds %d after a clean stop, want 5", got)
	}
	restarted := startRegional(t, r, clock)
	if resp := mustLimit(t, restarted.Service, rq); resp.Success || resp.Remaining != 0 {
		t.Fatalf("the restarted process admitted: %+v", resp)
	}
	// Half a window later the previous process's count still weighs in.
	clock.Set(630_000)
	if resp := mustLimit(t, restarted.Service, rq); resp.Success {
		t.Fatalf("the restarted process forgot the spent budget: %+v", resp)
	}
}

// TestMultiLimitHydratesInOneRoundTrip sends a batch of cold keys: one origin
// read for all of them.
func TestMultiLimitHydratesInOneRoundTrip(t *testing.T) {
	r := testserver.StartRedis(t)
	clock := newFakeClock(600_000)
	s := startRegional(t, r, clock)
	batch := []Request{req("a", 5, time.Minute, 1), req("b", 5, time.Second, 1), req("c", 5, time.Hour, 1)}
	if resp := mustMulti(t, s.Service, batch...); !resp.Passed {
		t.Fatalf("batch failed: %+v", resp)
	}
	if got := testutil.ToFloat64(s.metrics.originOps.WithLabelValues(opCold, resultOK)); got != 1 {
		t.Fatalf("cold reads = %v, want 1 for the whole batch", got)
	}
	// A batch that rolls back replays nothing.
	mustLimit(t, s.Service, req("full", 1, time.Minute, 1))
	if resp := mustMulti(t, s.Service, req("d", 5, time.Minute, 2), req("full", 1, time.Minute, 1)); resp.Passed {
		t.Fatal("batch with a full limit passed")
	}
	poll.Until(t, 5*time.Second, "replays", func() bool { return redisCount(t, r, cellOf(req("full", 1, time.Minute, 1), 600_000)) == 1 })
	time.Sleep(5 * replayInterval)
	if got := redisCount(t, r, cellOf(req("d", 5, time.Minute, 2), 600_000)); got != 0 {
		t.Fatalf("a rolled-back increment reached Redis: %d", got)
	}
}

// TestRedisFailureUnderLoad kills Redis (and, separately, freezes it) under
// load from two processes. No request fails or waits longer than the origin
// timeout, the breaker opens, and once Redis is back the retried replays bring
// it up to exactly what was accepted.
func TestRedisFailureUnderLoad(t *testing.T) {
	for _, fault := range []string{"kill", "freeze"} {
		t.Run(fault, func(t *testing.T) {
			r := testserver.StartRedis(t)
			clock := systemClock{}
			procs := []*regionalService{startRegional(t, r, clock), startRegional(t, r, clock)}
			const keys = 20
			var admitted [keys]atomic.Int64
			var slowest atomic.Int64
			var requests atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
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
							// hydrates from Redis, the call that may wait.
							k, id = -1, "cold-"+strconv.Itoa(g)+"-"+strconv.Itoa(i)
						}
						start := time.Now()
						// 30-day windows: the test never crosses a window
						// boundary on the real clock.
						resp, err := procs[i%2].Limit(context.Background(), req(id, 1_000_000, MaxDuration, 1))
						took := time.Since(start)
						requests.Add(1)
						if err != nil {
							t.Errorf("request failed: %v", err)
							return
						}
						if resp.Success && k >= 0 {
							admitted[k].Add(1)
						}
						for {
							old := slowest.Load()
							if int64(took) <= old || slowest.CompareAndSwap(old, int64(took)) {
								break
							}
						}
						time.Sleep(200 * time.Microsecond)
					}
				}(g)
			}
			time.Sleep(300 * time.Millisecond)
			if fault == "kill" {
				r.Kill()
			} else {
				r.Freeze()
			}
			poll.Until(t, 5*time.Second, "the breaker to open", func() bool {
				return procs[0].breaker.State() == gobreaker.StateOpen && procs[1].breaker.State() == gobreaker.StateOpen
			})
			time.Sleep(500 * time.Millisecond)
			if fault == "kill" {
				r.Start()
			} else {
				r.Thaw()
			}
			poll.Until(t, 5*time.Second, "the breaker to close", func() bool {
				return procs[0].breaker.State() == gobreaker.StateClosed && procs[1].breaker.State() == gobreaker.StateClosed
			})
			time.Sleep(200 * time.Millisecond)
			close(stop)
			wg.Wait()
			t.Logf("%d requests, slowest %v", requests.Load(), time.Duration(slowest.Load()))
			// The slack covers a loaded CI machine's scheduling; a request
			// that waited on the dead store without a timeout would hang.
			if d := time.Duration(slowest.Load()); d > originTimeout+700*time.Millisecond {
				t.Errorf("a request waited %v, longer than the origin timeout %v (plus 700 ms of scheduling slack)", d, originTimeout)
			}
			// Nothing accepted is lost. A replay whose answer was lost may
			// have been applied and is sent again (counting twice is
			// preferred to losing a count), so Redis may hold a little more.
			now := time.Now().UnixMilli()
			var accepted, stored int64
			for k := 0; k < keys; k++ {
				c := cellOf(req("k"+strconv.Itoa(k), 1, MaxDuration, 1), now)
				poll.Until(t, 5*time.Second, "Redis to catch up", func() bool { return redisCount(t, r, c) >= admitted[k].Load() })
				accepted += admitted[k].Load()
				stored += redisCount(t, r, c)
			}
			t.Logf("accepted %d, Redis holds %d (%d counted twice after lost answers)", accepted, stored, stored-accepted)
			for _, p := range procs {
				if got := testutil.ToFloat64(p.metrics.replayExpired); got != 0 {
					t.Errorf("%v accepted units expired unreplayed", got)
				}
			}
		})
	}
}

// TestCorruptRedisValues: a cell whose Redis value is huge, negative or not a
// number never admits past the limit, never reports remaining outside
// [0, limit], and never stops the other keys from converging: an INCRBY that
// would overflow leaves the breaker closed and the next replay lands.
func TestCorruptRedisValues(t *testing.T) {
	r := testserver.StartRedis(t)
	clock := newFakeClock(600_000)
	a, b := startRegional(t, r, clock), startRegional(t, r, clock)
	const huge = "9223372036854775000"
	check := func(who string, resp Response, wantSuccess bool) {
		t.Helper()
		if resp.Success != wantSuccess || resp.Remaining < 0 || resp.Remaining > resp.Limit {
			t.Fatalf("%s: %+v, want success %v and remaining within [0, %d]", who, resp, wantSuccess, resp.Limit)
		}
	}

	// A cold cell holding a huge count: denied, remaining 0.
	hot := req("hot", 10, time.Minute, 1)
	if _, err := r.Do("SET", RedisKey(new(cellOf(hot, 600_000))), huge); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		check("huge cell", mustLimit(t, a.Service, hot), false)
	}

	// A warm cell that A already admitted into, then corrupted: A's replay
	// INCRBY would overflow. Key "spent" is spent in Redis by B meanwhile.
	warm := req("warm", 10, time.Minute, 1)
	check("warm", mustLimit(t, a.Service, warm), true)
	poll.Until(t, 5*time.Second, "warm replay", func() bool { return redisCount(t, r, cellOf(warm, 600_000)) == 1 })
	if _, err := r.Do("SET", RedisKey(new(cellOf(warm, 600_000))), strconv.FormatInt(math.MaxInt64, 10)); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		mustLimit(t, a.Service, warm) // each replay of these would overflow
		time.Sleep(2 * replayInterval)
	}
	spent := req("spent", 3, time.Minute, 1)
	for range 3 {
		check("B spends", mustLimit(t, b.Service, spent), true)
	}
	poll.Until(t, 5*time.Second, "B's replay", func() bool { return redisCount(t, r, cellOf(spent, 600_000)) == 3 })
	check("A on a key spent in Redis", mustLimit(t, a.Service, spent), false)
	if got := testutil.ToFloat64(a.metrics.breakerState); got != 0 {
		t.Fatalf("breaker state %v after one corrupt key, want 0 (closed)", got)
	}
	if v, _ := r.Do("GET", RedisKey(new(cellOf(warm, 600_000)))); v != strconv.Itoa(MaxStoredCount) {
		t.Fatalf("overflowing cell holds %s, want it capped at %d", v, MaxStoredCount)
	}
	check("warm after overflow", mustLimit(t, a.Service, warm), false)

	// A negative count lends no budget; a value that is not a number denies.
	neg := req("negative", 2, time.Minute, 1)
	junk := req("junk", 2, time.Minute, 1)
	r.Do("SET", RedisKey(new(cellOf(neg, 600_000))), "-1000")
	r.Do("SET", RedisKey(new(cellOf(junk, 600_000))), "not-a-count")
	check("negative 1", mustLimit(t, a.Service, neg), true)
	check("negative 2", mustLimit(t, a.Service, neg), true)
	check("negative 3", mustLimit(t, a.Service, neg), false)
	check("junk", mustLimit(t, a.Service, junk), false)
}

// TestIdleCopyIsReadFirst: B holds a key, A spends 8 of its 10, and B's first
// request after an idle spell longer than maxCopyAge reads Redis before
// deciding, so a cost of 3 is denied (11 of 10 before). A key with requests
// more often than freshnessInterval never waits: its refreshes run in the
// background.
func TestIdleCopyIsReadFirst(t *testing.T) {
	r := testserver.StartRedis(t)
	clock := newFakeClock(600_000)
	a, b := startRegional(t, r, clock), startRegional(t, r, clock)
	day := 24 * time.Hour
	if resp := mustLimit(t, b.Service, req("idle", 10, day, 0)); resp.Remaining != 10 {
		t.Fatalf("B's first read: %+v", resp)
	}
	for range 8 {
		mustLimit(t, a.Service, req("idle", 10, day, 1))
	}
	poll.Until(t, 5*time.Second, "A's replay", func() bool { return redisCount(t, r, cellOf(req("idle", 10, day, 1), 600_000)) == 8 })
	clock.Advance(2 * time.Second)
	if resp := mustLimit(t, b.Service, req("idle", 10, day, 3)); resp.Success || resp.Remaining != 2 {
		t.Fatalf("B after 2 s idle: %+v, want denied with 2 remaining", resp)
	}
	if got := testutil.ToFloat64(b.metrics.originOps.WithLabelValues(opAged, resultOK)); got != 1 {
		t.Fatalf("aged reads = %v, want 1", got)
	}

	// A hot key: a request every 400 ms for 10 s of clock refreshes in the
	// background only.
	hot := req("hot", 1_000_000, day, 1)
	mustLimit(t, b.Service, hot)
	for range 25 {
		clock.Advance(400 * time.Millisecond)
		mustLimit(t, b.Service, hot)
		time.Sleep(3 * replayInterval) // let a queued background refresh run
	}
	if got := testutil.ToFloat64(b.metrics.originOps.WithLabelValues(opAged, resultOK)); got != 1 {
		t.Fatalf("aged reads after the hot key = %v, want still 1", got)
	}
	// About one per 800 ms of clock (every second request finds the copy
	// older than 500 ms): 12 or 13; the slack covers a refresh still queued
	// on a loaded machine.
	if got := testutil.ToFloat64(b.metrics.originOps.WithLabelValues(opStale, resultOK)); got < 8 {
		t.Fatalf("background refreshes of the hot key = %v, want about one per 800 ms of clock", got)
	}
}

package ratelimit

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/regional"
	"github.com/unkeyed/ratelimit/services/ratelimit/mysqlstore"
	"github.com/unkeyed/ratelimit/services/ratelimit/redisstore"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// traceDeployment is where a trace's requests are decided: procs
// processes in each of regions regions (one process alone has no stores),
// each region's on a regional store, the regions on one global store (in
// memory, or real servers), one regional write in faultEvery (0: none)
// lost, applied and answered late, or applied twice.
type traceDeployment struct {
	procs, regions, faultEvery int
	// servers, if set, are real servers to run on instead: a Redis for
	// each region, a MariaDB for the regions.
	servers *traceServers
}

// traceServers are real servers that traces run on: a Redis server for
// each region and one MariaDB, started once for many traces and emptied
// before each (see reset).
type traceServers struct {
	redis []redis.UniversalClient
	db    *sql.DB
}

// startTraceServers starts the servers of regions regions, stopped when
// t ends.
func startTraceServers(t testing.TB, regions int) *traceServers {
	t.Helper()
	s := &traceServers{}
	for range regions {
		opts, err := redisstore.Options(testserver.StartRedis(t).URL())
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(opts)
		t.Cleanup(func() { c.Close() })
		s.redis = append(s.redis, c)
	}
	if regions > 1 {
		_, s.db = dbtest.Start(t)
	}
	return s
}

// reset empties the servers: what a trace counted does not reach the next.
func (s *traceServers) reset(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	for _, c := range s.redis {
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if s.db != nil {
		if _, err := s.db.ExecContext(ctx, "DELETE FROM ratelimit_window_counts"); err != nil {
			t.Fatal(err)
		}
	}
}

// reportBudget returns how many traces of how many requests the report
// runs in d: 8 of 20,000, and on real servers, where every request is a
// round trip or more, 4 of 10,000.
func (d traceDeployment) reportBudget() (traces, requests int) {
	if d.servers != nil {
		return 4, 10_000
	}
	return 8, 20_000
}

// regional returns region r's regional store.
func (d traceDeployment) regional(t testing.TB, r int) store.Regional {
	if d.servers == nil {
		return storetest.NewMemRegional()
	}
	o, err := redisstore.New(d.servers.redis[r])
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// global returns the regions' global store.
func (d traceDeployment) global() store.Global {
	if d.servers == nil {
		return storetest.NewMemGlobal()
	}
	return mysqlstore.New(d.servers.db)
}

// start makes the deployment's processes on clock and returns them, the
// rounds of their loops (tick: the regional loop's, every 10 ms; global:
// flush and sync, every second) and the region of each.
func (d traceDeployment) start(t testing.TB, clock *fakeClock, rng *rand.Rand) (ps []*Service, tick, global []func(), region []int) {
	if d.procs*max(d.regions, 1) == 1 {
		return []*Service{newTestService(t, clock)}, nil, nil, []int{0}
	}
	ctx := context.Background()
	if d.servers != nil {
		d.servers.reset(t)
	}
	g := d.global()
	faultSeed := rng.Uint64()
	for r := range max(d.regions, 1) {
		faulty := storetest.NewFaultyRegional(d.regional(t, r))
		if d.faultEvery > 0 {
			// Drawn per key and write of it, not from the trace's source:
			// the order in which a replay sends its keys follows a map's,
			// which would draw another fault for each and make a trace
			// unrepeatable.
			var mu sync.Mutex
			writes := map[store.CellKey]uint64{}
			faulty.SetWriteFault(func(k store.CellKey) storetest.WriteFault {
				mu.Lock()
				writes[k]++
				n := writes[k]
				mu.Unlock()
				h := fnv.New64a()
				fmt.Fprintf(h, "%d %+v", r, k)
				draw := rand.New(rand.NewPCG(faultSeed^h.Sum64(), n))
				if draw.IntN(d.faultEvery) != 0 {
					return storetest.WriteOK
				}
				return []storetest.WriteFault{storetest.WriteLost, storetest.WriteLate, storetest.WriteTwice}[draw.IntN(3)]
			})
		}
		for range d.procs {
			opts := []Option{WithClock(clock), WithRegionalStore(faulty), WithRegisterer(prometheus.NewRegistry())}
			if d.regions > 1 {
				opts = append(opts, WithGlobalStore(g), WithGlobalFlushIntervals(DefaultGlobalFlushInterval, DefaultGlobalFullFlushInterval),
					WithGlobalSyncInterval(DefaultGlobalSyncInterval))
			}
			s, err := New(fmt.Sprintf("r%d", r), opts...)
			if err != nil {
				t.Fatal(err)
			}
			ps, region = append(ps, s), append(region, r)
			p := &regionalService{Service: s}
			tick = append(tick, p.tick)
			if d.regions > 1 {
				global = append(global, func() { s.global.Flush(ctx, s.global.FullFlushDue()); s.global.Sync(ctx) })
			}
		}
	}
	return ps, tick, global, region
}

// lag is how late a process of region a may see what a process of region
// b admitted: convergenceLag in a region, and across regions a flush and
// a sync (every second, with their jitter) and a regional lag each side.
func (d traceDeployment) lag(a, b int) int64 {
	if a == b {
		return convergenceLag.Milliseconds()
	}
	return (DefaultGlobalFlushInterval+DefaultGlobalSyncInterval).Milliseconds()*12/10 + 2*convergenceLag.Milliseconds()
}

// traceLoops runs a deployment's loops as its processes would as a trace's
// clock moves: the regional loop's round every 10 ms, and a global flush
// and sync every second.
type traceLoops struct {
	ticks, globals       []func()
	lastTick, lastGlobal int64
}

// until runs the rounds due up to now. Past the first 200 ms of an idle
// gap the rounds find nothing new to do but carry what the first ones
// published across the regions: a longer gap (hours, for a rate of a few
// an hour) runs its first 200 ms and its tail (see gapTail), not hundreds
// of thousands of rounds.
func (l *traceLoops) until(now int64) {
	gapStart := l.lastTick
	for l.lastTick+10 <= now {
		l.lastTick += 10
		for _, tick := range l.ticks {
			tick()
		}
		if l.lastTick >= l.lastGlobal+DefaultGlobalSyncInterval.Milliseconds() {
			l.lastGlobal = l.lastTick
			for _, g := range l.globals {
				g()
			}
		}
		if tail := l.gapTail(); l.lastTick == gapStart+200 && now-l.lastTick > tail {
			l.lastTick = now - tail
			l.lastGlobal = min(l.lastGlobal, l.lastTick-DefaultGlobalSyncInterval.Milliseconds())
		}
	}
}

// gapTail is how much of an idle gap's end runs its rounds: 3 s, three
// global rounds, which bring every region what any other published before
// the gap; 200 ms where there is no global store.
func (l *traceLoops) gapTail() int64 {
	if len(l.globals) == 0 {
		return 200
	}
	return 3000
}

// namedDeployment is a deployment as the tests and the report name it.
type namedDeployment struct {
	name string
	d    traceDeployment
}

// realDeployments are the deployments on real servers, with faults at the
// store seam: two processes on a Redis, and two regions of two processes,
// a Redis each, on a MariaDB. They skip under -short.
func realDeployments(t *testing.T) []namedDeployment {
	if testing.Short() {
		t.Skip("starts Redis and MariaDB")
	}
	servers := startTraceServers(t, 2)
	return []namedDeployment{
		{"two processes, one real Redis, 1 regional write in 10 faulted", traceDeployment{procs: 2, faultEvery: 10, servers: servers}},
		{"two regions of two processes, a real Redis each, a real MariaDB, 1 regional write in 10 faulted",
			traceDeployment{procs: 2, regions: 2, faultEvery: 10, servers: servers}},
	}
}

// runTraces runs seeds traces in each deployment of rows, and fails a
// trace that admits past its reference (beyond the convergence bound) more
// than share of the tokens it admitted (0: nothing).
func runTraces(t *testing.T, rows []namedDeployment, seeds int, share float64, trace func(seed uint64, d traceDeployment) traceCount) {
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			var total traceCount
			for _, seed := range traceSeeds(t, seeds) {
				c := trace(seed, row.d)
				if c.overTokens > share*float64(c.tokens) {
					t.Errorf("seed %d: %d of %d admissions past the reference beyond the convergence bound (%.1f tokens)",
						seed, c.overAdmitted, c.admitted, c.overTokens)
				}
				total.add(c)
			}
			t.Logf("%d requests, %d admitted, %d over-admitted (%.1f tokens), %d over-denied (%.1f %%)",
				total.requests, total.admitted, total.overAdmitted, total.overTokens, total.overDenied, pct(total.overDenied, total.requests))
		})
	}
}

// unseen returns what processes other than proc admitted (recent) that
// proc may not have seen at now: within the deployment's lag between
// their regions, or within copyAge, the age of the copy of the region's
// counts proc decides from (see copyAge).
func (d traceDeployment) unseen(recent []traceAdmission, region []int, proc int, now, copyAge int64) int64 {
	n := int64(0)
	for _, a := range recent {
		if a.proc != proc && a.at > now-max(d.lag(region[proc], region[a.proc]), copyAge) {
			n += a.cost
		}
	}
	return n
}

// trimRecent drops from recent the admissions no process can still be
// unaware of at now.
func (d traceDeployment) trimRecent(recent []traceAdmission, now int64) []traceAdmission {
	for len(recent) > 0 && recent[0].at <= now-max(d.lag(0, 1), copyAgeBound) {
		recent = recent[1:]
	}
	return recent
}

// copyAgeBound is how old a copy of the region's counts a key that is not
// strict may decide from (docs/regions.md, "Strict mode": its last decisions left
// more than a fifth of its limit, which the other processes' admissions
// within regional.MaxCopyAge may spend), with a replay and a loop round.
const copyAgeBound = int64((regional.MaxCopyAge + regional.ReplayInterval + 10*time.Millisecond) / time.Millisecond)

// copyAge returns how old a copy of the region's counts s may decide r
// from at now: copyAgeBound where r's key is not strict, 0 where it reads
// the store first (within the deployment's lag). The harness peeks at
// whether the key is strict to pick the bound docs/regions.md states; the
// references themselves know nothing of the limiter.
func copyAge(s *Service, r Request, now int64) int64 {
	k := keyOf(&r)
	if w := s.windows.Find(&k); w != nil && w.StrictUntil.Load() > now {
		return 0
	}
	return copyAgeBound
}

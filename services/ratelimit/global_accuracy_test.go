package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/global"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// crossRun is the outcome of one simulated set of regions.
type crossRun struct {
	// mean and max of admitted ÷ min(offered, limit) per identifier and
	// fixed window, all regions together: 1 is a perfect limiter, above 1
	// is over-admission, below 1 admits less than it could.
	mean, max float64
	reqs      int
	// writes is the rows all regions published per identifier and fixed
	// window: the write cost of sharing.
	writes float64
}

// crossCase is one simulated traffic pattern.
type crossCase struct {
	limit   int64
	dur     time.Duration
	load    float64   // offered, in all, as a multiple of the limit per duration
	shares  []float64 // of the load per region
	windows int       // fixed windows per identifier
	ids     int
	seed    uint64
	iv      global.Intervals
	// halfFloor shares as before the presence floor and the share-scaled
	// flush step (the report's "before" rows).
	halfFloor bool
}

// withHalfFloorOnly is the sharing before the presence floor and the
// share-scaled flush step.
func withHalfFloorOnly() Option { return func(s *settings) { s.halfFloorOnly = true } }

// defaultIntervals is the schedule a process runs without options;
// rfcIntervals the conservative one, ten seconds for everything.
var (
	defaultIntervals = global.Intervals{Flush: DefaultGlobalFlushInterval, FullFlush: DefaultGlobalFullFlushInterval, Sync: DefaultGlobalSyncInterval}
	rfcIntervals     = global.Intervals{Flush: 10 * time.Second, FullFlush: 10 * time.Second, Sync: 10 * time.Second}
)

// loopSim drives the flush and sync ticks of simulated regions on a fake
// clock as the global tier's Run does: each region ticks on its own phase, each tick
// jittered by up to global.TickJitter of its interval, flushes that are due
// walk every window. Database round trips take no simulated time.
type loopSim struct {
	clock               *fakeClock
	regions             []*region
	iv                  global.Intervals
	rng                 *rand.Rand
	nextFlush, nextSync []int64
	phase               []int64 // each region's anchor, as the global tier's Run takes it when it starts
}

func newLoopSim(t *testing.T, mem store.Global, clock *fakeClock, names []string, iv global.Intervals, rng *rand.Rand, opts ...Option) *loopSim {
	l := &loopSim{clock: clock, iv: iv, rng: rng}
	now := clock.Now().UnixMilli()
	for _, name := range names {
		r := newRegion(t, name, mem, clock, append([]Option{WithGlobalFlushIntervals(iv.Flush, iv.FullFlush), WithGlobalSyncInterval(iv.Sync)}, opts...)...)
		l.regions = append(l.regions, r)
		l.phase = append(l.phase, now-int64(rng.Float64()*float64(max(iv.Flush, iv.Sync).Milliseconds())))
		i := len(l.regions) - 1
		l.nextFlush = append(l.nextFlush, l.tick(i, now, iv.Flush))
		l.nextSync = append(l.nextSync, l.tick(i, now, iv.Sync))
	}
	return l
}

// runUntil runs every flush and sync due at or before at (unix ms), in time
// order, and leaves the clock at at.
func (l *loopSim) runUntil(at int64) {
	ctx := context.Background()
	for {
		next, which, isFlush := int64(1<<62), -1, false
		for i := range l.regions {
			if l.nextFlush[i] < next {
				next, which, isFlush = l.nextFlush[i], i, true
			}
			if l.nextSync[i] < next {
				next, which, isFlush = l.nextSync[i], i, false
			}
		}
		if next > at {
			break
		}
		l.clock.Set(next)
		r := l.regions[which]
		if isFlush {
			r.global.Flush(ctx, r.global.FullFlushDue())
			l.nextFlush[which] = l.tick(which, next, l.iv.Flush)
		} else {
			r.global.Sync(ctx)
			l.nextSync[which] = l.tick(which, next, l.iv.Sync)
		}
	}
	l.clock.Set(at)
}

// tick returns the jittered time of region i's tick after now on a schedule
// of interval, as the global tier schedules its ticks (global.TickJitter).
func (l *loopSim) tick(i int, now int64, interval time.Duration) int64 {
	ms := interval.Milliseconds()
	anchor := l.phase[i]
	return anchor + ((now-anchor)/ms+1)*ms + int64(l.rng.Float64()*global.TickJitter*float64(ms))
}

// simulateRegions runs len(c.shares) regions (one process each) on one
// in-memory global store with MySQL's semantics and a simulated clock. Identifiers receive Poisson traffic at
// c.load × limit per duration in all, split over the regions by c.shares.
func simulateRegions(t *testing.T, c crossCase) crossRun {
	clock := newFakeClock(0)
	durMs := c.dur.Milliseconds()
	start := int64(1_000_000) * durMs
	clock.Set(start)
	rng := rand.New(rand.NewPCG(c.seed, uint64(len(c.shares))))
	names := make([]string, len(c.shares))
	for i := range names {
		names[i] = fmt.Sprintf("r%d", i)
	}
	var opts []Option
	if c.halfFloor {
		opts = append(opts, withHalfFloorOnly())
	}
	mem := storetest.NewMemGlobal()
	sim := newLoopSim(t, mem, clock, names, c.iv, rng, opts...)
	type event struct {
		at      int64
		id, reg int
	}
	end := start + int64(c.windows)*durMs
	var events []event
	for id := 0; id < c.ids; id++ {
		for reg, share := range c.shares {
			if share == 0 {
				continue
			}
			rate := c.load * share * float64(c.limit) / float64(durMs)
			for at := float64(start); ; {
				at += rng.ExpFloat64() / rate
				if int64(at) >= end {
					break
				}
				events = append(events, event{int64(at), id, reg})
			}
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	admitted := make([][]int64, c.ids)
	offered := make([][]int64, c.ids)
	for i := range admitted {
		admitted[i] = make([]int64, c.windows)
		offered[i] = make([]int64, c.windows)
	}
	ctx := context.Background()
	for _, e := range events {
		sim.runUntil(e.at)
		resp, err := sim.regions[e.reg].Limit(ctx, Request{Workspace: "ws", Namespace: "x", Identifier: fmt.Sprint("id_", e.id),
			Limit: c.limit, Duration: c.dur, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		w := (e.at - start) / durMs
		offered[e.id][w]++
		if resp.Success {
			admitted[e.id][w]++
		}
	}
	run := crossRun{reqs: len(events)}
	n := 0
	for id := range admitted {
		for w := 1; w < c.windows; w++ { // the first window starts with nothing shared
			if offered[id][w] == 0 {
				continue
			}
			ratio := float64(admitted[id][w]) / float64(min(offered[id][w], c.limit))
			run.mean += ratio
			run.max = max(run.max, ratio)
			n++
		}
	}
	run.mean /= float64(n)
	sim.runUntil(end) // the last window's flushes
	run.writes = float64(mem.Published()) / float64(c.ids*c.windows)
	return run
}

// propagation is how long, in simulated time, one region's usage took to
// reach another's decisions.
type propagation struct {
	p50, p99, max time.Duration
	samples       int
}

// simulatePropagation measures propagation over trials pairs of regions a
// and b on the schedule iv, each pair with its own phases. In each, region a
// crosses the floor of keys keys at random moments (it spends 6
// of 10 at once); region b peeks at each key every 10 ms of simulated time
// until its decisions count what a spent.
func simulatePropagation(t *testing.T, iv global.Intervals, trials, keys int, seed uint64) propagation {
	var seen []time.Duration
	for trial := range trials {
		seen = append(seen, propagationTrial(t, iv, keys, seed+uint64(trial))...)
	}
	slices.Sort(seen)
	n := len(seen)
	return propagation{p50: seen[n/2], p99: seen[(n*99-1)/100], max: seen[n-1], samples: n}
}

func propagationTrial(t *testing.T, iv global.Intervals, n int, seed uint64) []time.Duration {
	const limit, spend = 10, 6
	clock := newFakeClock(1_000_000 * 86_400_000)
	rng := rand.New(rand.NewPCG(seed, 2))
	sim := newLoopSim(t, storetest.NewMemGlobal(), clock, []string{"a", "b"}, iv, rng)
	ctx := context.Background()
	start := clock.Now().UnixMilli()
	spendAt := make([]int64, n)
	for i := range spendAt {
		// Spread over several intervals, so that every phase of the
		// schedules is sampled.
		spendAt[i] = start + int64(rng.Float64()*float64(3*max(iv.Flush, iv.Sync).Milliseconds()))
	}
	req := func(i int, cost int64) Request {
		return Request{Workspace: "ws", Namespace: "x", Identifier: fmt.Sprint("key_", i), Limit: limit, Duration: 24 * time.Hour, Cost: cost}
	}
	seen := make([]time.Duration, 0, n)
	done := make([]bool, n)
	for now := start; len(seen) < n; now += 10 {
		sim.runUntil(now)
		for i := range spendAt {
			if spendAt[i] > now-10 && spendAt[i] <= now {
				if resp, err := sim.regions[0].Limit(ctx, req(i, spend)); err != nil || !resp.Success {
					t.Fatalf("region a: %+v, %v", resp, err)
				}
			}
			if spendAt[i] <= now && !done[i] {
				resp, err := sim.regions[1].Limit(ctx, req(i, 0))
				if err != nil {
					t.Fatal(err)
				}
				if resp.Remaining == limit-spend {
					seen = append(seen, time.Duration(now-spendAt[i])*time.Millisecond)
					done[i] = true
				}
			}
		}
		if now-start > 10*time.Minute.Milliseconds() {
			t.Fatalf("%d of %d keys never reached region b", n-len(seen), n)
		}
	}
	return seen
}

// TestCrossRegionAccuracy checks rows of the cross-region table on every
// run: traffic concentrated in one of three regions is limited exactly, ten
// regions sharing a key evenly far over its limit stay within 1.5× of it,
// and two regions sharing 60 s windows 70 %/30 % at twice the limit stay
// within 1.2× the limit.
func TestCrossRegionAccuracy(t *testing.T) {
	base := crossCase{limit: 100, dur: time.Minute, windows: 4, ids: 2, seed: 1, iv: defaultIntervals}
	conc := base
	conc.load, conc.shares = 10, []float64{1, 0, 0}
	if r := simulateRegions(t, conc); r.max > 1 || r.mean < 0.95 {
		t.Fatalf("traffic in one region: admitted ÷ limit mean %.3f max %.3f, want within [0.95, 1]", r.mean, r.max)
	}
	// The free zone: ten regions sharing a key evenly, far over its limit.
	// Each region alone stays under the old floor (half the limit) for most
	// of the window, which let them admit 4.2 times the limit.
	spread := base
	spread.load, spread.shares = 10, make([]float64, 10)
	for i := range spread.shares {
		spread.shares[i] = 0.1
	}
	if r := simulateRegions(t, spread); r.max > 1.5 {
		t.Fatalf("ten regions, spread evenly at 10× the limit: max %.3f, want at most 1.5", r.max)
	}
	hot := base
	hot.load, hot.shares, hot.ids = 2, []float64{0.7, 0.3}, 4
	r := simulateRegions(t, hot)
	if r.max > 1.2 || r.mean < 0.95 || r.mean > 1.1 {
		t.Fatalf("two regions 70 %%/30 %% at 2× the limit: mean %.3f max %.3f, want max ≤ 1.2 and mean within [0.95, 1.1]", r.mean, r.max)
	}
	t.Logf("two regions 70 %%/30 %% at 2× the limit: mean %.3f max %.3f", r.mean, r.max)
	hot.iv = rfcIntervals
	r = simulateRegions(t, hot)
	t.Logf("the same on the conservative schedule (10 s): mean %.3f max %.3f", r.mean, r.max)
}

// TestCrossRegionPropagation checks, on simulated time, that one region's
// usage reaches another within one flush and one sync interval plus their
// jitter, with the default schedule and the conservative one.
func TestCrossRegionPropagation(t *testing.T) {
	for _, iv := range []global.Intervals{defaultIntervals, rfcIntervals} {
		p := simulatePropagation(t, iv, 5, 20, 1)
		bound := time.Duration(float64(iv.Flush+iv.Sync)*(1+global.TickJitter)) + 10*time.Millisecond
		t.Logf("flush %v, sync %v: p50 %v, p99 %v, max %v over %d keys (bound %v)", iv.Flush, iv.Sync, p.p50, p.p99, p.max, p.samples, bound)
		if p.max > bound {
			t.Errorf("flush %v, sync %v: slowest key took %v, want at most one flush and one sync with jitter (%v)", iv.Flush, iv.Sync, p.max, bound)
		}
	}
}

// TestWriteCrossRegionAccuracyReport rewrites the cross-region tables of the
// report that ACCURACY_REPORT names (make accuracy): with the default
// schedule and the conservative one.
func TestWriteCrossRegionAccuracyReport(t *testing.T) {
	out := os.Getenv("ACCURACY_REPORT")
	if out == "" {
		t.Skip("set ACCURACY_REPORT=file to write the report")
	}
	for _, sec := range []struct {
		name      string
		iv        global.Intervals
		halfFloor bool
	}{{"cross-region", defaultIntervals, false}, {"cross-region-half-floor", defaultIntervals, true}, {"cross-region-rfc", rfcIntervals, true}} {
		if err := replaceSection(out, sec.name, crossRegionTable(t, sec.iv, sec.halfFloor)); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| flush / full flush / sync | keys | p50 | p99 | max | bound: flush + sync + jitter |\n|---|---:|---:|---:|---:|---:|\n")
	for _, iv := range []global.Intervals{defaultIntervals, rfcIntervals} {
		p := simulatePropagation(t, iv, 20, 20, 7)
		bound := time.Duration(float64(iv.Flush+iv.Sync) * (1 + global.TickJitter))
		fmt.Fprintf(&b, "| %v / %v / %v | %d | %.2f s | %.2f s | %.2f s | %.1f s |\n", iv.Flush, iv.FullFlush, iv.Sync, p.samples,
			p.p50.Seconds(), p.p99.Seconds(), p.max.Seconds(), bound.Seconds())
	}
	if err := replaceSection(out, "propagation", b.String()); err != nil {
		t.Fatal(err)
	}
}

// crossRegionTable simulates the rows of the cross-region table on the
// schedule iv, with the sharing of today or (halfFloor) the one before the
// presence floor and the share-scaled flush step.
func crossRegionTable(t *testing.T, iv global.Intervals, halfFloor bool) string {
	floor := global.PresenceFloor // windows of a minute and more
	if halfFloor {
		floor = global.UtilizationFloor
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| R | traffic | offered (× limit) | 60 s windows: mean | max | rows written per key and window | 10 min windows: mean | max | rows written |\n")
	fmt.Fprintf(&b, "|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range []int{2, 3, 5, 10} {
		even := make([]float64, r)
		for i := range even {
			even[i] = 1 / float64(r)
		}
		hot := make([]float64, r)
		hot[0] = 0.7
		for i := 1; i < r; i++ {
			hot[i] = 0.3 / float64(r-1)
		}
		one := make([]float64, r)
		one[0] = 1
		type row struct {
			name   string
			load   float64
			shares []float64
		}
		rows := []row{{"all in one region", 10, one}}
		loads := []float64{10}
		if r == 2 {
			loads = []float64{1, 2, 10}
		}
		for _, load := range loads {
			rows = append(rows, row{"70 % in one region, 30 % spread", load, hot})
		}
		for _, load := range loads {
			rows = append(rows, row{"spread evenly", load, even})
		}
		rows = append(rows, row{fmt.Sprintf("spread evenly, just under the floor in every region (bound R × floor = %.2f)", float64(r)*floor),
			float64(r) * floor * 0.96, even})
		for _, c := range rows {
			ids := 2
			if r == 2 {
				ids = 6 // the rows the targets are about get more samples
			}
			short := simulateRegions(t, crossCase{limit: 100, dur: time.Minute, load: c.load, shares: c.shares, windows: 6, ids: ids, seed: 3, iv: iv, halfFloor: halfFloor})
			long := simulateRegions(t, crossCase{limit: 100, dur: 10 * time.Minute, load: c.load, shares: c.shares, windows: 6, ids: 2, seed: 3, iv: iv, halfFloor: halfFloor})
			fmt.Fprintf(&b, "| %d | %s | %.2f | %.3f | %.3f | %.1f | %.3f | %.3f | %.1f |\n", r, c.name, c.load, short.mean, short.max, short.writes,
				long.mean, long.max, long.writes)
		}
	}
	return b.String()
}

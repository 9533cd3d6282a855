package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/regional"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// regionRun is the outcome of one simulated region.
type regionRun struct {
	windows int     // fixed windows judged (identifier × window)
	mean    float64 // mean of admitted ÷ min(offered, limit) per window
	min     float64
	max     float64
	maxOver float64 // the largest admitted ÷ limit of any window
	calls   int     // store round trips (all operations)
	reqs    int
}

// simulateRegion runs n limiter processes of one region on an in-memory
// regional store with Redis's semantics (package redisstore shows one server and a
// Redis Cluster answer a random sequence of the same calls alike) and a
// simulated clock. Requests arrive as Poisson traffic at load × limit per
// duration for each of ids identifiers, each at a random process; every
// process runs its replay and refresh loop every regional.ReplayInterval of simulated
// time, as Run would. Round trips to the store take no simulated time, so the
// numbers show the algorithm's convergence, not network latency.
func simulateRegion(t testing.TB, n int, limit int64, dur time.Duration, load float64, windows, ids int, seed uint64) regionRun {
	mem := storetest.NewMemRegional()
	durMs := dur.Milliseconds()
	start := int64(1_000_000) * durMs
	clock := newFakeClock(start)
	procs := make([]*Service, n)
	regs := make([]*prometheus.Registry, n)
	for i := range procs {
		regs[i] = prometheus.NewRegistry()
		s, err := New("sim", WithClock(clock), WithRegionalStore(mem), WithRegisterer(regs[i]))
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = s
	}
	type event struct {
		at       int64
		id, proc int
	}
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	rate := load * float64(limit) / float64(durMs)
	end := start + int64(windows)*durMs
	var events []event
	for id := 0; id < ids; id++ {
		for at := float64(start); ; {
			at += rng.ExpFloat64() / rate
			if int64(at) >= end {
				break
			}
			events = append(events, event{int64(at), id, rng.IntN(n)})
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	admitted := make([][]int64, ids)
	offered := make([][]int64, ids)
	for i := range admitted {
		admitted[i], offered[i] = make([]int64, windows), make([]int64, windows)
	}
	names := make([]string, ids)
	for i := range names {
		names[i] = "id_" + strconv.Itoa(i)
	}
	ctx := context.Background()
	tick := regional.ReplayInterval.Milliseconds()
	nextTick := start + tick
	for _, e := range events {
		for nextTick <= e.at {
			clock.Set(nextTick)
			for _, p := range procs {
				p.regional.Replay(ctx)
				p.regional.RefreshStale(ctx)
			}
			nextTick += tick
		}
		clock.Set(e.at)
		w := (e.at - start) / durMs
		offered[e.id][w]++
		resp, err := procs[e.proc].Limit(ctx, Request{Workspace: "ws", Namespace: "sim", Identifier: names[e.id], Limit: limit, Duration: dur, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Success {
			admitted[e.id][w]++
		}
	}
	run := regionRun{min: 1e9, reqs: len(events)}
	var sum float64
	// The first window starts cold everywhere; judge the ones after it.
	for id := range admitted {
		for w := 1; w < windows; w++ {
			base := min(offered[id][w], limit)
			if base == 0 {
				continue
			}
			ratio := float64(admitted[id][w]) / float64(base)
			sum += ratio
			run.windows++
			run.min = min(run.min, ratio)
			run.max = max(run.max, ratio)
			run.maxOver = max(run.maxOver, float64(admitted[id][w])/float64(limit))
		}
	}
	run.mean = sum / float64(max(run.windows, 1))
	for _, reg := range regs {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "unkey_ratelimit_origin_operations_total" {
				for _, m := range mf.GetMetric() {
					run.calls += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return run
}

// TestRegionAccuracy checks one configuration of the region table on every
// run: three processes at ten times the limit admit between 0.95 and
// 1 + 0.05·N of the limit per window.
func TestRegionAccuracy(t *testing.T) {
	const n = 3
	run := simulateRegion(t, n, 100, time.Second, 10, 6, 4, 1)
	t.Logf("N=%d: admitted ÷ limit per window: mean %.3f, min %.3f, max %.3f (%d windows, %d requests, %d regional store calls)",
		n, run.mean, run.min, run.max, run.windows, run.reqs, run.calls)
	if run.min < 0.95 || run.max > 1+0.05*n {
		t.Fatalf("admitted ÷ limit per window in [%.3f, %.3f], want within [0.95, %.2f]", run.min, run.max, 1+0.05*n)
	}
}

// TestWriteRegionAccuracyReport rewrites the region table of the report that
// ACCURACY_REPORT names (make accuracy).
func TestWriteRegionAccuracyReport(t *testing.T) {
	out := os.Getenv("ACCURACY_REPORT")
	if out == "" {
		t.Skip("set ACCURACY_REPORT=file to write the report")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| N | bound 1+0.05·N | load | limit | duration | windows | admitted ÷ min(offered, limit): mean | min | max | regional store calls per request |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for n := 1; n <= 9; n++ {
		for _, load := range []float64{0.9, 1, 10} {
			for _, limit := range []int64{5, 100, 1000} {
				for _, dur := range []time.Duration{time.Second, 10 * time.Second} {
					ids := int(max(2, 400/limit))
					run := simulateRegion(t, n, limit, dur, load, 5, ids, 11)
					fmt.Fprintf(&b, "| %d | %.2f | %.1f× | %d | %v | %d | %.3f | %.3f | %.3f | %.4f |\n",
						n, 1+0.05*float64(n), load, limit, dur, run.windows, run.mean, run.min, run.max,
						float64(run.calls)/float64(max(run.reqs, 1)))
				}
			}
		}
	}
	if err := replaceSection(out, "region", b.String()); err != nil {
		t.Fatal(err)
	}
}

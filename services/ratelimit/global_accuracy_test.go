package ratelimit

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// crossRun is the outcome of one simulated set of regions.
type crossRun struct {
	mean, max float64 // admitted ÷ limit per fixed window, all regions together
	reqs      int
}

// simulateRegions runs r regions (one process each) on one real MariaDB and a
// simulated clock. Identifiers receive Poisson traffic at load × limit per
// duration in all, split over the regions by shares. Each region flushes and
// syncs every 10 s of simulated time plus up to 20 % jitter, from its own
// phase, as runGlobal would. Database round trips take no simulated time.
func simulateRegions(t *testing.T, mdbReset func(), r int, limit int64, dur time.Duration, load float64, shares []float64, windows, ids int, seed uint64) crossRun {
	mdbReset()
	clock := newFakeClock(0)
	durMs := dur.Milliseconds()
	start := int64(1_000_000) * durMs
	clock.Set(start)
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	regions := make([]*region, r)
	nextFlush := make([]int64, r)
	nextSync := make([]int64, r)
	interval := globalFlushInterval.Milliseconds()
	for i := range regions {
		regions[i] = newRegion(t, fmt.Sprintf("r%d", i), crossDB, clock)
		phase := int64(rng.Float64() * float64(interval))
		nextFlush[i] = start + phase
		nextSync[i] = start + int64(rng.Float64()*float64(interval))
	}
	type event struct {
		at      int64
		id, reg int
	}
	end := start + int64(windows)*durMs
	var events []event
	for id := 0; id < ids; id++ {
		for reg, share := range shares {
			if share == 0 {
				continue
			}
			rate := load * share * float64(limit) / float64(durMs)
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
	admitted := make([][]int64, ids)
	for i := range admitted {
		admitted[i] = make([]int64, windows)
	}
	ctx := context.Background()
	for _, e := range events {
		for {
			// Run every flush and sync due before this request, in time order.
			next, which, isFlush := int64(1<<62), -1, false
			for i := range regions {
				if nextFlush[i] < next {
					next, which, isFlush = nextFlush[i], i, true
				}
				if nextSync[i] < next {
					next, which, isFlush = nextSync[i], i, false
				}
			}
			if next > e.at {
				break
			}
			clock.Set(next)
			jitter := int64(rng.Float64() * globalSyncJitter * float64(interval))
			if isFlush {
				regions[which].flushGlobal(ctx, regions[which].st)
				nextFlush[which] = (next/interval+1)*interval + jitter
			} else {
				regions[which].syncGlobal(ctx, regions[which].st)
				nextSync[which] = (next/interval+1)*interval + jitter
			}
		}
		clock.Set(e.at)
		resp, err := regions[e.reg].Limit(ctx, Request{Workspace: "ws", Namespace: "x", Identifier: fmt.Sprint("id_", e.id),
			Limit: limit, Duration: dur, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Success {
			admitted[e.id][(e.at-start)/durMs]++
		}
	}
	run := crossRun{reqs: len(events)}
	n := 0
	for id := range admitted {
		for w := 1; w < windows; w++ { // the first window starts with nothing shared
			ratio := float64(admitted[id][w]) / float64(limit)
			run.mean += ratio
			run.max = max(run.max, ratio)
			n++
		}
	}
	run.mean /= float64(n)
	return run
}

// crossDB is the database of the cross-region simulations.
var crossDB *sql.DB

// openCrossDB starts a MariaDB for the simulations and returns a function
// that empties its table between runs.
func openCrossDB(t *testing.T) func() {
	_, sqlDB := openGlobalDB(t)
	crossDB = sqlDB
	return func() {
		if _, err := sqlDB.Exec("DELETE FROM ratelimit_window_counts"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCrossRegionAccuracy checks two rows of the cross-region table on every
// run: traffic concentrated in one of three regions is limited exactly, and
// traffic spread evenly just under the floor is bounded by R × floor.
func TestCrossRegionAccuracy(t *testing.T) {
	reset := openCrossDB(t)
	conc := simulateRegions(t, reset, 3, 100, time.Minute, 10, []float64{1, 0, 0}, 4, 2, 1)
	if conc.max > 1 || conc.mean < 0.95 {
		t.Fatalf("traffic in one region: admitted ÷ limit mean %.3f max %.3f, want within [0.95, 1]", conc.mean, conc.max)
	}
	under := simulateRegions(t, reset, 3, 100, time.Minute, 3*0.45, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, 4, 2, 1)
	if under.max >= 3*globalUtilizationFloor {
		t.Fatalf("even spread under the floor: max %.3f, want under R × floor = %.2f", under.max, 3*globalUtilizationFloor)
	}
	t.Logf("concentrated: mean %.3f max %.3f; spread under the floor: mean %.3f max %.3f", conc.mean, conc.max, under.mean, under.max)
}

// TestWriteCrossRegionAccuracyReport rewrites the cross-region table of the
// report that ACCURACY_REPORT names (make accuracy).
func TestWriteCrossRegionAccuracyReport(t *testing.T) {
	out := os.Getenv("ACCURACY_REPORT")
	if out == "" {
		t.Skip("set ACCURACY_REPORT=file to write the report")
	}
	reset := openCrossDB(t)
	var b strings.Builder
	fmt.Fprintf(&b, "| R | traffic | offered (× limit) | free-zone bound (R × floor) | 60 s windows: mean | max | 10 min windows: mean | max |\n")
	fmt.Fprintf(&b, "|---:|---|---:|---|---:|---:|---:|---:|\n")
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
		floorLoad := float64(r) * 0.48 // each region just under the floor
		for _, c := range []struct {
			name   string
			load   float64
			shares []float64
			bound  string
		}{
			{"all in one region", 10, one, "1"},
			{"70 % in one region, 30 % spread", 10, hot, "—"},
			{"spread evenly", 10, even, "—"},
			{"spread evenly, just under the floor in every region", floorLoad, even, fmt.Sprintf("just under R × floor = %.1f", float64(r)*globalUtilizationFloor)},
		} {
			short := simulateRegions(t, reset, r, 100, time.Minute, c.load, c.shares, 6, 2, 3)
			long := simulateRegions(t, reset, r, 100, 10*time.Minute, c.load, c.shares, 6, 2, 3)
			fmt.Fprintf(&b, "| %d | %s | %.2f | %s | %.3f | %.3f | %.3f | %.3f |\n", r, c.name, c.load, c.bound,
				short.mean, short.max, long.mean, long.max)
		}
	}
	if err := replaceSection(out, "cross-region", b.String()); err != nil {
		t.Fatal(err)
	}
}

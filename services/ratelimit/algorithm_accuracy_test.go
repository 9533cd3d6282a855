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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/regional"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// The models' accuracy: each model's admissions against its own bound,
// under the same traffic, in one process, three processes of a region and
// two and five regions, with the convergence intervals a process runs
// with (replay and refresh every 10 ms, global flush and sync every
// second, a full flush every 10 s).

// modelSpec is one model under test: a request template and its bound.
type modelSpec struct {
	name string
	req  Request
	// capacity is what the bound allows at once: the limit a window or
	// period, a bucket's burst.
	capacity int64
	// period is the length traffic is scaled to: the window, a bucket's
	// refill of its limit, a calendar day.
	period time.Duration
}

// modelTopology is how many regions and processes a region decide.
type modelTopology struct {
	name             string
	regions, perRegn int
}

// modelEvent is one request: when, and at which process.
type modelEvent struct {
	at   int64
	proc int
}

// modelTraffic generates the requests of one run over [start, end) for
// procs processes, scaled to capacity per period.
type modelTraffic struct {
	name string
	gen  func(rng *rand.Rand, start, end int64, capacity int64, period int64, procs int) []modelEvent
}

// modelTraffics: steady (Poisson at twice the capacity per period, each
// request at a random process), bursty (every third period a burst of
// twice the capacity within 200 ms, over Poisson at half the capacity),
// adversarial (four times a period every process at once gets a volley of
// half the capacity, round robin: each decides from what it alone knows).
var modelTraffics = []modelTraffic{
	{"steady", func(rng *rand.Rand, start, end, capacity, period int64, procs int) []modelEvent {
		return poisson(rng, start, end, 2*float64(capacity)/float64(period), procs)
	}},
	{"bursty", func(rng *rand.Rand, start, end, capacity, period int64, procs int) []modelEvent {
		ev := poisson(rng, start, end, 0.5*float64(capacity)/float64(period), procs)
		for at := start + period/2; at < end; at += 3 * period {
			for range 2 * capacity {
				ev = append(ev, modelEvent{at + rng.Int64N(200), rng.IntN(procs)})
			}
		}
		return ev
	}},
	{"adversarial", func(rng *rand.Rand, start, end, capacity, period int64, procs int) []modelEvent {
		var ev []modelEvent
		for at := start + rng.Int64N(period/4); at < end; at += period / 4 {
			for i := range capacity / 2 {
				ev = append(ev, modelEvent{at, int(i) % procs})
			}
		}
		return ev
	}},
}

// poisson returns Poisson arrivals at rate per ms, each at a random
// process.
func poisson(rng *rand.Rand, start, end int64, rate float64, procs int) []modelEvent {
	var ev []modelEvent
	for at := float64(start); ; {
		at += rng.ExpFloat64() / rate
		if int64(at) >= end {
			return ev
		}
		ev = append(ev, modelEvent{int64(at), rng.IntN(procs)})
	}
}

// modelRun is what one run admitted, judged by the model's bound.
type modelRun struct {
	requests, admitted int
	// over is the most the admissions exceeded the bound by, in units:
	// for a window, admitted in one window (or period, or for the
	// sliding window, in any interval of its length) less the limit;
	// for a bucket, max over intervals [s, t] of admitted − burst −
	// rate·(t − s).
	over float64
	// rowsPerMinute is what the regions published to the global store,
	// rows a minute for the key (0 with one region).
	rowsPerMinute float64
}

// simulateModel runs t's traffic on m in topology top.
func simulateModel(t testing.TB, m modelSpec, top modelTopology, tr modelTraffic, periods int, seed uint64) modelRun {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, uint64(top.regions*10+top.perRegn)))
	// Noon in Berlin: a calendar day's run crosses midnights.
	start := time.Date(2026, 10, 23, 12, 0, 0, 0, time.UTC).UnixMilli()
	clock := newFakeClock(start)
	global := storetest.NewMemGlobal()
	var procs []*Service
	var regs []*prometheus.Registry
	for r := range top.regions {
		regional := storetest.NewMemRegional()
		for range top.perRegn {
			reg := prometheus.NewRegistry()
			regs = append(regs, reg)
			opts := []Option{WithClock(clock), WithRegionalStore(regional), WithRegisterer(reg)}
			if top.regions > 1 {
				opts = append(opts, WithGlobalStore(global),
					WithGlobalFlushIntervals(DefaultGlobalFlushInterval, DefaultGlobalFullFlushInterval),
					WithGlobalSyncInterval(DefaultGlobalSyncInterval))
			}
			s, err := New(fmt.Sprintf("r%d", r), opts...)
			if err != nil {
				t.Fatal(err)
			}
			procs = append(procs, s)
		}
	}
	// The loops each process runs, each on a phase of its own.
	type job struct {
		next, every int64
		run         func()
	}
	var jobs []*job
	for _, s := range procs {
		jobs = append(jobs, &job{next: start + rng.Int64N(10), every: regional.ReplayInterval.Milliseconds(), run: func() {
			s.regional.Replay(ctx)
			s.regional.RefreshStale(ctx)
		}})
		if top.regions > 1 {
			jobs = append(jobs,
				&job{next: start + rng.Int64N(1000), every: DefaultGlobalFlushInterval.Milliseconds(), run: func() {
					s.global.Flush(ctx, s.global.FullFlushDue())
				}},
				&job{next: start + rng.Int64N(1000), every: DefaultGlobalSyncInterval.Milliseconds(), run: func() { s.global.Sync(ctx) }})
		}
	}
	period := m.period.Milliseconds()
	end := start + int64(periods)*period
	events := tr.gen(rng, start, end, m.capacity, period, len(procs))
	slices.SortStableFunc(events, func(a, b modelEvent) int { return cmp.Compare(a.at, b.at) })
	// The loops run for a while after each request, long enough for it to
	// reach every process; in a quiet stretch beyond that nothing changes
	// and their ticks are skipped.
	const horizon = 3000
	quietFrom := start + horizon
	runJobs := func(until int64) {
		for {
			var next *job
			for _, j := range jobs {
				if j.next > quietFrom && until > j.next {
					// Skip the quiet stretch: next tick at its phase
					// just before until.
					j.next += (until - j.next) / j.every * j.every
				}
				if next == nil || j.next < next.next {
					next = j
				}
			}
			if next.next > until {
				return
			}
			clock.Set(next.next)
			next.run()
			next.next += next.every
		}
	}
	var admitted []int64
	for _, e := range events {
		runJobs(e.at)
		clock.Set(e.at)
		quietFrom = e.at + horizon
		resp, err := procs[e.proc].Limit(ctx, m.req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Success {
			admitted = append(admitted, e.at)
		}
	}
	var rows float64
	for _, reg := range regs {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "unkey_ratelimit_global_writes_total" {
				rows += mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
	}
	return modelRun{requests: len(events), admitted: len(admitted), over: overBound(m, admitted),
		rowsPerMinute: rows / (float64(end-start) / 60_000)}
}

// overBound judges admitted (times, in order) by m's bound.
func overBound(m modelSpec, admitted []int64) float64 {
	var over float64
	switch {
	case m.req.Algorithm == TokenBucket:
		// The largest admitted − rate·(t − s) over intervals ending at
		// an admission is the level of a bucket that nothing refuses
		// (Lindley's recursion).
		rate := float64(m.req.Limit) / float64(m.req.Duration.Milliseconds())
		var level float64
		for i, at := range admitted {
			if i > 0 {
				level = max(0, level-rate*float64(at-admitted[i-1]))
			}
			level++
			over = max(over, level-float64(m.capacity))
		}
	case m.req.Algorithm == SlidingWindow && m.req.Calendar.IsZero():
		d := m.req.Duration.Milliseconds()
		from := 0
		for i, at := range admitted {
			for admitted[from] <= at-d {
				from++
			}
			over = max(over, float64(i-from+1)-float64(m.req.Limit))
		}
	default:
		counts := map[int64]int64{}
		for _, at := range admitted {
			seq := at / max(m.req.Duration.Milliseconds(), 1)
			if !m.req.Calendar.IsZero() {
				seq, _, _ = m.req.Calendar.At(at)
			}
			counts[seq]++
			over = max(over, float64(counts[seq]-m.req.Limit))
		}
	}
	return over
}

// modelSpecs are the models of the report: 100 per 10 s for the windows,
// a bucket of 100 refilled at 100 per 10 s, 1,000 a Berlin day.
func modelSpecs(t testing.TB) []modelSpec {
	day, err := calendar.New(calendar.Day, "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	base := Request{Workspace: "ws", Namespace: "sim", Identifier: "key", Limit: 100, Duration: 10 * time.Second, Cost: 1}
	fixed, bucket, cal := base, base, base
	fixed.Algorithm = FixedWindow
	bucket.Algorithm = TokenBucket
	cal.Duration, cal.Limit, cal.Calendar = 0, 1000, day
	return []modelSpec{
		{"sliding window, 100 per 10 s", base, 100, 10 * time.Second},
		{"fixed window, 100 per 10 s", fixed, 100, 10 * time.Second},
		{"token bucket, 10 a second, burst 100", bucket, 100, 10 * time.Second},
		{"calendar day (Europe/Berlin), 1,000", cal, 1000, 24 * time.Hour},
	}
}

var modelTopologies = []modelTopology{
	{"one process", 1, 1}, {"three processes of a region", 1, 3}, {"two regions", 2, 1}, {"five regions", 5, 1},
}

// TestModelsOverTheirBounds checks the report's adversarial rows on
// every run: in one process no model exceeds its bound; over three
// processes of a region and over five regions the fixed window and the
// calendar day exceed theirs by no more than the sliding window exceeds
// its own. A token bucket exceeds its bound across regions by less than
// the sliding window too, but in a region by what the processes admit at
// one instant from the same tokens: at most (N−1) times the tokens a
// volley finds (here, a quarter of a period's refill), once, and repaid
// by the next volley. Over the deployments, every model's worst case is
// at most the sliding window's.
func TestModelsOverTheirBounds(t *testing.T) {
	specs := modelSpecs(t)
	adversarial := modelTraffics[2]
	// The worst over the deployments, ÷ capacity, of each model.
	worst := make([]float64, len(specs))
	for _, top := range []modelTopology{modelTopologies[0], modelTopologies[1], modelTopologies[3]} {
		const periods = 12
		sliding := simulateModel(t, specs[0], top, adversarial, periods, 1)
		slidingShare := sliding.over / float64(specs[0].capacity)
		worst[0] = max(worst[0], slidingShare)
		for mi, m := range specs[1:] {
			p := periods
			if m.period > time.Hour {
				p = 2
			}
			run := simulateModel(t, m, top, adversarial, p, 1)
			share := run.over / float64(m.capacity)
			worst[mi+1] = max(worst[mi+1], share)
			t.Logf("%s, %s: over its bound by %.0f (%.1f %% of %d); the sliding window by %.1f %%",
				top.name, m.name, run.over, 100*share, m.capacity, 100*slidingShare)
			deciders := top.regions * top.perRegn
			switch {
			case deciders == 1 && run.over > 0:
				t.Errorf("one process, %s: over its bound by %.0f", m.name, run.over)
			case m.req.Algorithm == TokenBucket && top.regions == 1:
				// A volley finds a quarter of a period's refill.
				if limit := float64(deciders-1) * float64(m.req.Limit) / 4; run.over > limit {
					t.Errorf("%s, %s: over its bound by %.0f, more than (N−1) × the %.0f tokens a volley finds",
						top.name, m.name, run.over, float64(m.req.Limit)/4)
				}
			case share > slidingShare:
				t.Errorf("%s, %s: over its bound by %.1f %% of its capacity, more than the sliding window's %.1f %%",
					top.name, m.name, 100*share, 100*slidingShare)
			}
		}
	}
	for mi, m := range specs[1:] {
		if worst[mi+1] > worst[0] {
			t.Errorf("%s: worst over its bound %.1f %% of its capacity, more than the sliding window's worst, %.1f %%",
				m.name, 100*worst[mi+1], 100*worst[0])
		}
	}
}

// TestWriteModelAccuracyReport rewrites the models' table of the report
// that ACCURACY_REPORT names (make accuracy).
func TestWriteModelAccuracyReport(t *testing.T) {
	out := os.Getenv("ACCURACY_REPORT")
	if out == "" {
		t.Skip("set ACCURACY_REPORT=file to write the report")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| model | deciders | traffic | requests | admitted | over its bound, worst (units) | ÷ capacity | sliding window's, same traffic | global rows a minute |\n")
	fmt.Fprintf(&b, "|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	specs := modelSpecs(t)
	// worst[model][traffic] is the most the model exceeded its bound, ÷
	// its capacity, over every deployment.
	worst := make([][]float64, len(specs))
	for i := range worst {
		worst[i] = make([]float64, len(modelTraffics))
	}
	for _, top := range modelTopologies {
		for ti, tr := range modelTraffics {
			sliding := simulateModel(t, specs[0], top, tr, 30, 7)
			for mi, m := range specs {
				periods := 30
				if m.period > time.Hour {
					periods = 3
				}
				run := sliding
				if m.name != specs[0].name {
					run = simulateModel(t, m, top, tr, periods, 7)
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %.0f | %.3f | %.3f | %.1f |\n", m.name, top.name, tr.name,
					run.requests, run.admitted, run.over, run.over/float64(m.capacity), sliding.over/float64(specs[0].capacity), run.rowsPerMinute)
				worst[mi][ti] = max(worst[mi][ti], run.over/float64(m.capacity))
			}
		}
	}
	fmt.Fprintf(&b, "\nEach model's worst case over its bound, ÷ its capacity, over the four deployments above, beside the sliding window's:\n\n")
	fmt.Fprintf(&b, "| model |")
	for _, tr := range modelTraffics {
		fmt.Fprintf(&b, " %s | sliding window's |", tr.name)
	}
	fmt.Fprintf(&b, "\n|---|%s\n", strings.Repeat("---:|", 2*len(modelTraffics)))
	for mi, m := range specs[1:] {
		fmt.Fprintf(&b, "| %s |", m.name)
		for ti := range modelTraffics {
			fmt.Fprintf(&b, " %.3f | %.3f |", worst[mi+1][ti], worst[0][ti])
		}
		fmt.Fprintf(&b, "\n")
	}
	if err := replaceSection(out, "models", b.String()); err != nil {
		t.Fatal(err)
	}
}

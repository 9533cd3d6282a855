package ratelimit

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
)

// Seeded random traces of the window models against references written
// from first principles here: for a fixed window a counter per window of
// its length from the epoch; for a sliding window the formula over two
// such counters; for a calendar a counter per date, week, month or year as
// package time reads them on the zone's clock. The limit changes on one
// request in 200 (an override, a rule edited): a window's limit is a
// parameter, its length its identity. As for buckets, the reference judges
// each decision after every admission the limiter made before it.

// windowTraceModel is one window model under trace.
type windowTraceModel struct {
	name string
	// request returns the model's request of limit and cost.
	request func(limit, cost int64) Request
	// period is the length traffic is scaled to.
	period time.Duration
	// allows reports whether the reference admits cost at ms, given the
	// counts it holds (by its own key of a window) and the limit.
	allows func(counts map[int64]int64, ms, cost, limit int64) bool
	// keyOf returns the reference's key of the window holding ms.
	keyOf func(ms int64) int64
}

// fixedModel is a fixed window of d: a counter per window from the epoch.
func fixedModel(d time.Duration) windowTraceModel {
	ms := d.Milliseconds()
	return windowTraceModel{
		name: "fixed window, " + d.String(),
		request: func(limit, cost int64) Request {
			r := req("k", limit, d, cost)
			r.Algorithm = FixedWindow
			return r
		},
		period: d,
		keyOf:  func(at int64) int64 { return at / ms },
		allows: func(counts map[int64]int64, at, cost, limit int64) bool {
			return counts[at/ms]+cost <= limit
		},
	}
}

// slidingModel is a sliding window of d: this window's counter and the
// previous one's, weighted by the share of it the sliding window still
// overlaps, truncated (the formula docs/models.md states).
func slidingModel(d time.Duration) windowTraceModel {
	ms := d.Milliseconds()
	return windowTraceModel{
		name:    "sliding window, " + d.String(),
		request: func(limit, cost int64) Request { return req("k", limit, d, cost) },
		period:  d,
		keyOf:   func(at int64) int64 { return at / ms },
		allows: func(counts map[int64]int64, at, cost, limit int64) bool {
			seq := at / ms
			elapsed := at - seq*ms
			prev := counts[seq-1] * (ms - elapsed) / ms // trunc(prev × (1 − elapsed/d))
			return cost <= limit && counts[seq]+prev+cost <= limit
		},
	}
}

// calendarTraceModel is a calendar of unit in zone: a counter per period as
// package time names it on the zone's clock.
func calendarTraceModel(t testing.TB, unit calendar.Unit, zone string) windowTraceModel {
	p, err := calendar.New(unit, zone)
	if err != nil {
		t.Fatal(err)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	key := func(at int64) int64 {
		y, m, d := time.UnixMilli(at).In(loc).Date()
		switch unit {
		case calendar.Day:
			return int64(y)*10000 + int64(m)*100 + int64(d)
		case calendar.Week:
			wy, w := time.UnixMilli(at).In(loc).ISOWeek()
			return int64(wy)*100 + int64(w)
		case calendar.Month:
			return int64(y)*100 + int64(m)
		}
		return int64(y)
	}
	period := map[calendar.Unit]time.Duration{calendar.Day: 24 * time.Hour, calendar.Week: 7 * 24 * time.Hour,
		calendar.Month: 30 * 24 * time.Hour, calendar.Year: 365 * 24 * time.Hour}[unit]
	return windowTraceModel{
		name: fmt.Sprintf("calendar %s, %s", unit, zone),
		request: func(limit, cost int64) Request {
			r := req("k", limit, 0, cost)
			r.Calendar = p
			return r
		},
		period: period,
		keyOf:  key,
		allows: func(counts map[int64]int64, at, cost, limit int64) bool {
			return counts[key(at)]+cost <= limit
		},
	}
}

// windowTrace runs one trace of n requests of m in deployment d, the
// limit changing on one request in changeEvery, traffic at about twice
// it. With more than one process, what the others admitted that the
// deciding process cannot have seen (see traceDeployment.unseen) is
// allowed past the reference's limit.
func windowTrace(t testing.TB, m windowTraceModel, seed uint64, n, changeEvery int, d traceDeployment) traceCount {
	rng := rand.New(rand.NewPCG(seed, 7))
	start := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() + rng.Int64N(25*365*24*3600*1000)
	clock := newFakeClock(start)
	ps, ticks, globals, region := d.start(t, clock, rng)
	loops := traceLoops{ticks: ticks, globals: globals, lastTick: start, lastGlobal: start}
	limit := 1 + rng.Int64N(1000)
	counts := map[int64]int64{}
	var recent []traceAdmission // admissions within the longest lag
	var c traceCount
	elapsed := 0.0
	for i := range n {
		if i > 0 && rng.IntN(changeEvery) == 0 {
			limit = max(1, limit+rng.Int64N(limit/2+1)-limit/4)
		}
		elapsed += traceGap(rng, m.period, limit)
		clock.Set(start + int64(elapsed))
		now := clock.ms.Load()
		loops.until(now)
		recent = d.trimRecent(recent, now)
		proc := rng.IntN(len(ps))
		cost := traceCost(rng, limit)
		unseen := d.unseen(recent, region, proc, now, copyAge(ps[proc], m.request(limit, cost), now))
		refOK := m.allows(counts, now, cost, limit+unseen)
		refStrictOK := m.allows(counts, now, cost, limit)
		got := mustLimit(t, ps[proc], m.request(limit, cost)).Success
		c.requests++
		switch {
		case got && !refOK:
			c.overAdmitted++
			c.overTokens += float64(cost)

		case !got && refStrictOK:
			c.overDenied++
		}
		if got {
			c.admitted++
			c.tokens += cost
			counts[m.keyOf(now)] += cost
			if len(ps) > 1 {
				recent = append(recent, traceAdmission{at: now, proc: proc, cost: cost})
			}
		}
	}
	return c
}

// windowModels are the models of the window traces: windows of a minute
// and of a day, and calendars across the clock changes of zones whose
// rules are odd (Gaza's midnights twice, Apia's skipped day, Lord Howe's
// half-hour change, Santiago's).
func windowModels(t testing.TB) []windowTraceModel {
	return []windowTraceModel{
		fixedModel(time.Minute), fixedModel(24 * time.Hour),
		slidingModel(time.Minute), slidingModel(24 * time.Hour),
		calendarTraceModel(t, calendar.Day, "Europe/Berlin"), calendarTraceModel(t, calendar.Day, "Asia/Gaza"),
		calendarTraceModel(t, calendar.Day, "Pacific/Apia"), calendarTraceModel(t, calendar.Day, "Australia/Lord_Howe"),
		calendarTraceModel(t, calendar.Week, "America/Santiago"), calendarTraceModel(t, calendar.Month, "Europe/Berlin"),
	}
}

// TestWindowTracesUnderChange: in one process, the fixed and sliding
// windows and calendars admit nothing their references would refuse, and
// deny nothing they would admit, while the limit changes on one request in
// 200.
func TestWindowTracesUnderChange(t *testing.T) {
	for _, m := range windowModels(t) {
		var total traceCount
		for _, seed := range traceSeeds(t, 2) {
			c := windowTrace(t, m, seed, *traceBudget/4, 200, traceDeployment{procs: 1})
			if c.overAdmitted != 0 || c.overDenied != 0 {
				t.Errorf("%s, seed %d: %d over-admitted, %d over-denied of %d requests", m.name, seed, c.overAdmitted, c.overDenied, c.requests)
			}
			total.add(c)
		}
		t.Logf("%s: %d requests, %d admitted", m.name, total.requests, total.admitted)
	}
}

// TestWindowTracesTwoProcesses: the window traces on two processes of a
// region, on an in-memory regional store that loses, delays and doubles
// one write in ten, and on a real Redis with the same faults. Nothing is
// admitted past the reference beyond what the other process admitted
// within the region's convergence lag, or the age of a copy a key that is
// not strict decides from (see windowTrace).
func TestWindowTracesTwoProcesses(t *testing.T) {
	rows := []namedDeployment{{"in memory, 1 regional write in 10 faulted", traceDeployment{procs: 2, faultEvery: 10}}}
	if !testing.Short() {
		rows = append(rows, realDeployments(t)[0])
	}
	for _, m := range windowModels(t) {
		t.Run(m.name, func(t *testing.T) {
			runTraces(t, rows, 1, 0, func(seed uint64, d traceDeployment) traceCount {
				return windowTrace(t, m, seed, *traceBudget/20, 200, d)
			})
		})
	}
}

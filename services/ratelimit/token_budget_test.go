package ratelimit

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// The token budget simulation: LLM calls arrive at random, each spends a
// long-tailed number of tokens (known only when it ends) over a time that
// grows with them, many at once, against a budget of tokens per minute.
// Three ways of keeping the budget are compared on the same traffic:
//
//   - check then report (Envoy AI Gateway's way, on this limiter): a call
//     starts if a check (cost 0) passes, and reports its tokens when it
//     ends, counted whatever the verdict;
//   - reserve and settle: a call starts if a reservation of an estimate
//     passes, and settles at its real cost when it ends (less gives the
//     rest back, more counts the extra);
//   - envoyproxy/ratelimit's fixed window, checked then reported as Envoy
//     AI Gateway does: one counter per minute, shared by every region (its
//     best case: a Redis every region reaches), a check passes while the
//     counter is at most the budget.
//
// Tokens are counted as spent when their call ends. The measure is what
// the budget is for: tokens spent in each fixed minute, and in the
// fullest 60 s sliding window, against the budget.

// budgetCase is one row of the table.
type budgetCase struct {
	strategy string // "check-report", "reserve", "fixed-window"
	estimate int64  // the reservation's estimate
	regions  int
	load     float64 // offered tokens per window ÷ budget
}

// budgetRun is what a run measured.
type budgetRun struct {
	calls, refused          int
	meanFixed, maxFixed     float64 // tokens per fixed minute ÷ budget, steady minutes
	maxSliding              float64 // fullest 60 s window ÷ budget
	maxInFlight, meanFlight float64
}

const (
	budgetTokens   = 100_000 // a minute
	budgetMaxToken = 8_000   // max_tokens of every call: no call spends more
	budgetMinutes  = 20
	budgetTick     = time.Second // the global loops' interval in the simulation
)

// callCost draws a call's tokens: log-normal (median 800, mean about
// 1,300, one in a hundred above 8,000) capped at max_tokens.
func callCost(rng *rand.Rand) int64 {
	c := int64(math.Exp(math.Log(800) + rng.NormFloat64()))
	return max(1, min(c, budgetMaxToken))
}

// callDuration is how long a call of cost tokens runs: half a second to the
// first token, then 50 tokens a second.
func callDuration(cost int64) int64 { return 500 + cost*20 }

const budgetMeanCost = 1319 // the mean of callCost, for the arrival rate

// budgetEvent is a call starting or ending, in unix ms.
type budgetEvent struct {
	at     int64
	end    bool
	call   int
	region int
}

type budgetEvents []budgetEvent

func (e budgetEvents) Len() int { return len(e) }
func (e budgetEvents) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].end && !e[j].end // ends first: what a call gives back is there for the next
}
func (e budgetEvents) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *budgetEvents) Push(x any)   { *e = append(*e, x.(budgetEvent)) }
func (e *budgetEvents) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

func simulateBudget(t testing.TB, c budgetCase, seed uint64) budgetRun {
	rng := rand.New(rand.NewPCG(seed, 42))
	start := int64(600_000_000) // a minute boundary
	clock := newFakeClock(start)
	mem := storetest.NewMemGlobal()
	services := make([]*Service, c.regions)
	for i := range services {
		opts := []Option{WithClock(clock)}
		if c.regions > 1 {
			opts = append(opts, WithGlobalStore(mem))
		}
		s, err := New(fmt.Sprint("r", i), opts...)
		if err != nil {
			t.Fatal(err)
		}
		services[i] = s
	}
	// Arrivals: Poisson at load × budget tokens a minute.
	rate := c.load * budgetTokens / budgetMeanCost / 60_000 // calls a ms
	end := start + budgetMinutes*60_000
	var events budgetEvents
	for at := start; ; {
		at += int64(rng.ExpFloat64()/rate) + 1
		if at >= end {
			break
		}
		events = append(events, budgetEvent{at: at, call: len(events), region: rng.IntN(c.regions)})
	}
	costs := make([]int64, len(events))
	for i := range costs {
		costs[i] = callCost(rng)
	}
	heap.Init(&events)
	live := map[int]Hold{}       // the calls under way, with what a reservation would give back
	spentAt := map[int64]int64{} // tokens spent by ms
	fixed := map[int64]int64{}   // envoyproxy/ratelimit's counter, by minute
	var run budgetRun
	nextTick := start + budgetTick.Milliseconds()
	ctx := context.Background()
	req := func() Request {
		return Request{Workspace: "ws", Namespace: "llm", Identifier: "team", Limit: budgetTokens, Duration: time.Minute}
	}
	var flightSamples, flightSum float64
	for events.Len() > 0 {
		ev := heap.Pop(&events).(budgetEvent)
		for c.regions > 1 && nextTick <= ev.at {
			clock.Set(nextTick)
			for _, s := range services {
				s.global.Flush(ctx, (nextTick-start)%10_000 == 0)
			}
			for _, s := range services {
				s.global.Sync(ctx)
			}
			nextTick += budgetTick.Milliseconds()
		}
		clock.Set(ev.at)
		s := services[ev.region]
		cost := costs[ev.call]
		if ev.end {
			spentAt[ev.at] += cost
			refund := live[ev.call]
			delete(live, ev.call)
			switch c.strategy {
			case "check-report":
				rq := req()
				rq.Cost, rq.Report = cost, true
				mustLimit(t, s, rq)
			case "reserve":
				if cost < refund.Amount {
					refund.Amount -= cost
					if _, err := s.GiveBack(ctx, refund); err != nil {
						t.Fatal(err)
					}
				} else if extra := cost - refund.Amount; extra > 0 {
					rq := req()
					rq.Cost, rq.Report = extra, true
					mustLimit(t, s, rq)
				}
			case "fixed-window":
				fixed[ev.at/60_000] += cost
			}
			continue
		}
		run.calls++
		admitted := false
		var refund Hold
		switch c.strategy {
		case "check-report":
			rq := req()
			rq.Cost = 0
			admitted = mustLimit(t, s, rq).Success
		case "reserve":
			rq := req()
			rq.Cost, rq.Reserve = c.estimate, true
			resp := mustLimit(t, s, rq)
			admitted = resp.Success
			refund = Hold{Workspace: rq.Workspace, Namespace: rq.Namespace, Identifier: rq.Identifier,
				Duration: rq.Duration, Limit: rq.Limit, Sequence: CellOf(resp, rq.Duration), Amount: c.estimate}
		case "fixed-window":
			admitted = fixed[ev.at/60_000] <= budgetTokens
		}
		if !admitted {
			run.refused++
			continue
		}
		live[ev.call] = refund
		heap.Push(&events, budgetEvent{at: ev.at + callDuration(cost), end: true, call: ev.call, region: ev.region})
		flightSamples++
		flightSum += float64(len(live))
		run.maxInFlight = max(run.maxInFlight, float64(len(live)))
	}
	run.meanFlight = flightSum / max(flightSamples, 1)
	// Tokens per fixed minute, from the third minute on (steady).
	perMinute := map[int64]int64{}
	for at, n := range spentAt {
		perMinute[at/60_000] += n
	}
	var sum float64
	var steady int
	for m := start/60_000 + 2; m < end/60_000; m++ {
		v := float64(perMinute[m]) / budgetTokens
		sum += v
		steady++
		run.maxFixed = max(run.maxFixed, v)
	}
	run.meanFixed = sum / float64(steady)
	// The fullest 60 s window, at a second's resolution.
	perSecond := map[int64]int64{}
	last := int64(0)
	for at, n := range spentAt {
		perSecond[at/1000] += n
		last = max(last, at/1000)
	}
	var window int64
	for sec := start / 1000; sec <= last; sec++ {
		window += perSecond[sec] - perSecond[sec-60]
		if sec >= start/1000+120 {
			run.maxSliding = max(run.maxSliding, float64(window)/budgetTokens)
		}
	}
	return run
}

// simulateBudgetRuns runs c with n seeds: the counts and means add up, the
// maxima are the largest of any run.
func simulateBudgetRuns(t testing.TB, c budgetCase, n int) budgetRun {
	var out budgetRun
	for seed := range uint64(n) {
		r := simulateBudget(t, c, seed+1)
		out.calls += r.calls
		out.refused += r.refused
		out.meanFixed += r.meanFixed / float64(n)
		out.meanFlight += r.meanFlight / float64(n)
		out.maxFixed = max(out.maxFixed, r.maxFixed)
		out.maxSliding = max(out.maxSliding, r.maxSliding)
		out.maxInFlight = max(out.maxInFlight, r.maxInFlight)
	}
	return out
}

// TestTokenBudgetsHold: on the simulated traffic at twice the budget,
// reserving about twice the mean call and settling keeps the fullest minute
// near the budget (the calls that spend more than their estimate report
// the rest), where checking and reporting overspends by the tokens of the
// calls in flight; reserving max_tokens never overspends, and holds back
// more.
func TestTokenBudgetsHold(t *testing.T) {
	check := simulateBudget(t, budgetCase{strategy: "check-report", regions: 1, load: 2}, 1)
	reserve := simulateBudget(t, budgetCase{strategy: "reserve", estimate: 2_500, regions: 1, load: 2}, 1)
	reserveMax := simulateBudget(t, budgetCase{strategy: "reserve", estimate: budgetMaxToken, regions: 1, load: 2}, 1)
	t.Logf("check then report: %+v", check)
	t.Logf("reserve 2,500 and settle: %+v", reserve)
	t.Logf("reserve max_tokens and settle: %+v", reserveMax)
	if check.maxSliding < 1.3 {
		t.Errorf("check then report spent at most %.2f× the budget: the simulation has too few calls in flight to compare", check.maxSliding)
	}
	if reserve.maxSliding > 1.3 || reserve.maxSliding > check.maxSliding-0.2 {
		t.Errorf("reserve 2,500 and settle: the fullest minute spent %.2f× the budget (check then report: %.2f×)",
			reserve.maxSliding, check.maxSliding)
	}
	if reserveMax.maxSliding > 1.0 {
		t.Errorf("reserving max_tokens: the fullest minute spent %.2f× the budget, more than it", reserveMax.maxSliding)
	}
	if reserveMax.meanFixed >= reserve.meanFixed {
		t.Errorf("reserving max_tokens spent %.2f× a minute, reserving 2,500 %.2f×: a larger estimate must hold back more",
			reserveMax.meanFixed, reserve.meanFixed)
	}
}

// TestWriteTokenBudgetReport rewrites the token budget table of the report
// that ACCURACY_REPORT names (make accuracy writes docs/ACCURACY.md).
func TestWriteTokenBudgetReport(t *testing.T) {
	out := os.Getenv("ACCURACY_REPORT")
	if out == "" {
		t.Skip("set ACCURACY_REPORT=file to write the report")
	}
	var b strings.Builder
	b.WriteString("| strategy | regions | offered | calls refused | in flight (mean, max) | tokens a minute: mean | tokens a minute: max | fullest 60 s |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	names := map[string]string{"check-report": "check, then report", "fixed-window": "envoyproxy/ratelimit fixed window, check then report"}
	for _, load := range []float64{1, 2} {
		for _, regions := range []int{1, 2} {
			for _, c := range []budgetCase{
				{strategy: "fixed-window"},
				{strategy: "check-report"},
				{strategy: "reserve", estimate: budgetMeanCost},
				{strategy: "reserve", estimate: 2_500},
				{strategy: "reserve", estimate: budgetMaxToken},
			} {
				c.regions, c.load = regions, load
				r := simulateBudgetRuns(t, c, 5)
				name := names[c.strategy]
				switch c.estimate {
				case budgetMeanCost:
					name = "reserve 1,319 (the mean call), settle"
				case 2_500:
					name = "reserve 2,500, settle"
				case budgetMaxToken:
					name = "reserve 8,000 (max_tokens), settle"
				}
				fmt.Fprintf(&b, "| %s | %d | %.0f× | %.1f %% | %.0f, %.0f | %.2f× | %.2f× | %.2f× |\n", name, regions, load,
					pct(r.refused, r.calls), r.meanFlight, r.maxInFlight, r.meanFixed, r.maxFixed, r.maxSliding)
			}
		}
	}
	if err := replaceSection(out, "token-budgets", b.String()); err != nil {
		t.Fatal(err)
	}
}

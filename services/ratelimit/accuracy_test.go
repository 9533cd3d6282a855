package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/golden"
)

// accuracyRun is the outcome of one synthetic trace judged against an exact
// sliding log.
type accuracyRun struct {
	load          float64 // offered load as a multiple of the limit
	requests      int
	admitted      int
	wrongAllowed  int // admitted although the exact window was full
	wrongDenied   int // denied although the exact window had room
	maxWindowSeen int64
	// The same from the third window on, when every identifier has a full
	// previous window behind it (traffic starts at a random phase in the
	// first window).
	steadyRequests, steadyWrongAllowed, steadyWrongDenied int
	steadyMaxWindowSeen                                   int64
	// maxFixed and minFixed are the most and fewest requests one identifier
	// had admitted in one fixed window (steady windows only for minFixed).
	maxFixed, minFixed int64
}

// simulateAccuracy offers Poisson traffic at load × limit per duration to ids
// identifiers for windows durations, decides every request with the limiter
// on a simulated clock, and judges each decision with an exact sliding log
// over what the limiter actually admitted: a request is wrongly allowed when
// the admitted requests in the last duration (itself included) exceed the
// limit, and wrongly denied when it would have fit.
func simulateAccuracy(t testing.TB, ids int, limit int64, dur time.Duration, load float64, windows int, seed uint64) accuracyRun {
	type event struct {
		at int64
		id int
	}
	rng := rand.New(rand.NewPCG(seed, uint64(load*1000)))
	durMs := dur.Milliseconds()
	start := int64(1_000) * durMs // window-aligned, far from zero
	end := start + int64(windows)*durMs
	rate := load * float64(limit) / float64(durMs) // arrivals per ms per identifier
	var events []event
	for id := 0; id < ids; id++ {
		at := float64(start) + rng.Float64()*float64(durMs) // random phase
		for {
			at += rng.ExpFloat64() / rate
			if int64(at) >= end {
				break
			}
			events = append(events, event{int64(at), id})
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })

	clock := newFakeClock(start)
	s := newTestService(t, clock)
	names := make([]string, ids)
	for i := range names {
		names[i] = "id_" + strconv.Itoa(i)
	}
	logs := make([][]int64, ids)  // admitted timestamps per identifier
	fixed := make([][]int64, ids) // admitted per identifier per fixed window
	for i := range fixed {
		fixed[i] = make([]int64, windows)
	}
	steadyFrom := start + 2*durMs
	run := accuracyRun{load: load, requests: len(events)}
	ctx := context.Background()
	for _, e := range events {
		clock.Set(e.at)
		resp, err := s.Limit(ctx, Request{Workspace: "ws", Namespace: "acc", Identifier: names[e.id], Limit: limit, Duration: dur, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		log := logs[e.id]
		// Drop what left the exact window (t-dur, t].
		i := 0
		for i < len(log) && log[i] <= e.at-durMs {
			i++
		}
		log = log[i:]
		inWindow := int64(len(log))
		steady := e.at >= steadyFrom
		if steady {
			run.steadyRequests++
		}
		if resp.Success {
			run.admitted++
			fixed[e.id][(e.at-start)/durMs]++
			log = append(log, e.at)
			if inWindow+1 > limit {
				run.wrongAllowed++
				if steady {
					run.steadyWrongAllowed++
				}
			}
			run.maxWindowSeen = max(run.maxWindowSeen, inWindow+1)
			if steady {
				run.steadyMaxWindowSeen = max(run.steadyMaxWindowSeen, inWindow+1)
			}
		} else if inWindow+1 <= limit {
			run.wrongDenied++
			if steady {
				run.steadyWrongDenied++
			}
		}
		logs[e.id] = log
	}
	run.minFixed = math.MaxInt64
	for _, f := range fixed {
		for w, n := range f {
			run.maxFixed = max(run.maxFixed, n)
			if w >= 2 && w < windows-1 {
				run.minFixed = min(run.minFixed, n)
			}
		}
	}
	return run
}

// TestAccuracyAgainstSlidingLog checks the guarantees of the sliding-window
// approximation against an exact sliding log: no fixed window admits more than
// the limit, no exact sliding window ever holds more than twice the limit (the
// current cell plus a previous cell assumed evenly spread), under overload
// every steady window still admits nearly the whole limit, and under half the
// limit nothing is denied once traffic is steady.
func TestAccuracyAgainstSlidingLog(t *testing.T) {
	const limit = 50
	for _, load := range []float64{0.5, 1, 2, 10} {
		r := simulateAccuracy(t, 50, limit, time.Minute, load, 6, 1)
		t.Logf("load %.1f×: %d requests, %d admitted, %.3f%% wrongly allowed, %.3f%% wrongly denied (steady: %.3f%%, %.3f%%), fullest exact window %d (steady %d), fixed windows %d..%d",
			load, r.requests, r.admitted, pct(r.wrongAllowed, r.requests), pct(r.wrongDenied, r.requests),
			pct(r.steadyWrongAllowed, r.steadyRequests), pct(r.steadyWrongDenied, r.steadyRequests),
			r.maxWindowSeen, r.steadyMaxWindowSeen, r.minFixed, r.maxFixed)
		if r.maxFixed > limit {
			t.Errorf("load %.1f×: a fixed window admitted %d of limit %d", load, r.maxFixed, limit)
		}
		if r.maxWindowSeen > 2*limit {
			t.Errorf("load %.1f×: an exact window held %d admitted requests of limit %d", load, r.maxWindowSeen, limit)
		}
		if load >= 2 && r.minFixed < limit*95/100 {
			t.Errorf("load %.1f×: a steady fixed window admitted only %d of limit %d", load, r.minFixed, limit)
		}
		if load == 0.5 && r.steadyWrongDenied > 0 {
			t.Errorf("load 0.5×: %d requests wrongly denied in steady state", r.steadyWrongDenied)
		}
	}
}

func pct(n, of int) float64 { return 100 * float64(n) / float64(of) }

// TestWriteAccuracyReport rewrites the single-process table of the report
// that ACCURACY_REPORT names (make accuracy writes docs/ACCURACY.md).
func TestWriteAccuracyReport(t *testing.T) {
	out := os.Getenv("ACCURACY_REPORT")
	if out == "" {
		t.Skip("set ACCURACY_REPORT=file to write the report")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| limit | offered load | requests | admitted | wrongly allowed | wrongly denied | steady: wrongly allowed | steady: wrongly denied | fullest exact window (steady) | admitted per fixed window |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, lim := range []int64{10, 100, 1000} {
		for _, load := range []float64{0.5, 1, 2, 10} {
			ids := int(math.Max(20, 20_000/float64(lim)))
			r := simulateAccuracy(t, ids, lim, time.Minute, load, 10, 7)
			fmt.Fprintf(&b, "| %d | %.1f× | %d | %d | %.3f %% | %.3f %% | %.3f %% | %.3f %% | %d (%d) | %d–%d |\n",
				lim, load, r.requests, r.admitted, pct(r.wrongAllowed, r.requests), pct(r.wrongDenied, r.requests),
				pct(r.steadyWrongAllowed, r.steadyRequests), pct(r.steadyWrongDenied, r.steadyRequests),
				r.maxWindowSeen, r.steadyMaxWindowSeen, r.minFixed, r.maxFixed)
		}
	}
	if err := replaceSection(out, "single-process", b.String()); err != nil {
		t.Fatal(err)
	}
}

// replaceSection replaces the text between the markers
// <!-- name:begin --> and <!-- name:end --> in file with body.
func replaceSection(file, name, body string) error { return golden.Measured(file, name, body) }

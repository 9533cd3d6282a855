package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/invalid"
)

// TestReportsCount: the AI-gateway flow, a check of cost 0 before each LLM
// call and a report of the tokens it used after. Reports are counted
// whatever the verdict, so the report that crosses the budget is counted
// and the next check is refused (without reports counting, every report
// past the budget was dropped: 10 calls of 300 against 1,000 all admitted).
func TestReportsCount(t *testing.T) {
	clock := newFakeClock(60_000)
	s := newTestService(t, clock)
	const budget, used = 1000, 300
	admitted := 0
	for call := range 10 {
		check := mustLimit(t, s, req("team", budget, time.Minute, 0))
		if !check.Success {
			break
		}
		admitted++
		r := req("team", budget, time.Minute, used)
		r.Report = true
		rep := mustLimit(t, s, r)
		spent := int64(call+1) * used
		if rep.Success != (spent <= budget) || rep.Remaining != max(0, budget-spent) {
			t.Fatalf("report %d: %+v after %d spent of %d", call+1, rep, spent, budget)
		}
		if !rep.Success && rep.RetryAfter <= 0 {
			t.Fatalf("a spent budget's report says no wait: %+v", rep)
		}
	}
	if admitted != 4 {
		t.Fatalf("%d calls admitted, want 4 (the fourth report crosses 1,000 and is counted)", admitted)
	}
	// A denied report still counted: a fresh request of cost 1 is refused
	// until the window slides.
	if resp := mustLimit(t, s, req("team", budget, time.Minute, 1)); resp.Success {
		t.Fatalf("a request after the budget was spent: %+v", resp)
	}
	clock.Advance(2 * time.Minute)
	if resp := mustLimit(t, s, req("team", budget, time.Minute, 0)); !resp.Success {
		t.Fatalf("two windows later: %+v", resp)
	}
}

// TestReportBounds: a report's cost is bounded like any cost, and a
// MultiLimit, all or nothing, holds none.
func TestReportBounds(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	r := req("x", 10, time.Minute, MaxCost+1)
	r.Report = true
	var ve *invalid.Error
	if _, err := s.Limit(context.Background(), r); !errors.As(err, &ve) || ve.Field != "cost" {
		t.Fatalf("a report over MaxCost: %v", err)
	}
	r.Cost = 1
	if _, err := s.MultiLimit(context.Background(), []Request{req("y", 10, time.Minute, 1), r}); !errors.As(err, &ve) ||
		ve.Field != "limits[1].report" {
		t.Fatalf("a report in a MultiLimit: %v", err)
	}
	// Nothing of the refused batch was counted.
	if resp := mustLimit(t, s, req("y", 10, time.Minute, 0)); resp.Remaining != 10 {
		t.Fatalf("the refused batch counted: %+v", resp)
	}
}

// TestReportsNeverWrap: reports of the largest cost, without end, stop at
// the counter's ceiling instead of wrapping negative and opening the
// window (before: 1,024 reports of 2^53 wrapped it, and every request of
// the window passed again).
func TestReportsNeverWrap(t *testing.T) {
	s := newTestService(t, newFakeClock(60_000))
	r := req("flood", 1000, time.Minute, MaxCost)
	r.Report = true
	for i := range 2000 {
		if resp := mustLimit(t, s, r); resp.Success || resp.Remaining != 0 {
			t.Fatalf("report %d: %+v", i+1, resp)
		}
	}
	if resp := mustLimit(t, s, req("flood", 1000, time.Minute, 1)); resp.Success {
		t.Fatalf("a request after 2,000 reports of 2^53: %+v", resp)
	}
}

// TestRefusedReportWaits: a refused report (counted whatever the verdict,
// as Envoy's hits over the limit are) answers RetryAfter as any request
// does: how long until a request of its cost passes, the one just counted
// included. One millisecond sooner the same request (not a report, so
// that it counts nothing when refused) is refused, and then it passes;
// for each model, mid-window.
func TestRefusedReportWaits(t *testing.T) {
	for _, m := range []struct {
		name string
		alg  Algorithm
	}{{"sliding window", SlidingWindow}, {"fixed window", FixedWindow}, {"token bucket", TokenBucket}} {
		t.Run(m.name, func(t *testing.T) {
			clock := newFakeClock(1_800_000_015_200)
			s := newTestService(t, clock)
			r := req("hits", 4, time.Minute, 1)
			r.Algorithm, r.Report = m.alg, true
			var refused Response
			for range 6 {
				if refused = mustLimit(t, s, r); !refused.Success {
					break
				}
			}
			if refused.Success || refused.RetryAfter <= 0 {
				t.Fatalf("a report past the limit: %+v, want refused with a wait", refused)
			}
			plain := r
			plain.Report = false
			clock.Advance(refused.RetryAfter - time.Millisecond)
			if resp := mustLimit(t, s, plain); resp.Success {
				t.Fatalf("1 ms before RetryAfter %v: %+v, want refused", refused.RetryAfter, resp)
			}
			clock.Advance(time.Millisecond)
			if resp := mustLimit(t, s, plain); !resp.Success {
				t.Fatalf("at RetryAfter %v: %+v, want admitted", refused.RetryAfter, resp)
			}
		})
	}
}

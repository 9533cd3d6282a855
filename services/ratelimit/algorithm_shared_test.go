package ratelimit

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// models returns one request of each model on id, of limit a minute (a
// bucket of limit a minute with a burst of limit; a calendar day).
func models(t *testing.T, id string, limit int64) map[string]Request {
	t.Helper()
	day, err := calendar.New(calendar.Day, "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	sliding := req(id+"-sliding", limit, time.Minute, 1)
	fixed := req(id+"-fixed", limit, time.Minute, 1)
	fixed.Algorithm = FixedWindow
	bucket := req(id+"-bucket", limit, time.Minute, 1)
	bucket.Algorithm = TokenBucket
	cal := Request{Workspace: "ws", Namespace: "ns", Identifier: id + "-calendar", Limit: limit, Cost: 1, Calendar: day}
	return map[string]Request{"sliding": sliding, "fixed": fixed, "bucket": bucket, "calendar": cal}
}

// TestModelsConvergeThroughTheRegion: what process A admitted reaches B
// through the regional store, for every model: B, which has not seen the
// key, admits only the rest.
func TestModelsConvergeThroughTheRegion(t *testing.T) {
	for name, rq := range models(t, "user", 10) {
		t.Run(name, func(t *testing.T) {
			o := storetest.NewMemRegional()
			clock := newFakeClock(1_700_000_010_000)
			a, b := newRegional(t, o, clock), newRegional(t, o, clock)
			for i := range 6 {
				if !mustLimit(t, a.Service, rq).Success {
					t.Fatalf("A denied request %d of 10", i)
				}
			}
			a.tick()
			admitted := 0
			for range 10 {
				if mustLimit(t, b.Service, rq).Success {
					admitted++
				}
			}
			if admitted != 4 {
				t.Fatalf("B admitted %d after A took 6 of 10, want 4", admitted)
			}
			b.tick()
			// A, warm and strict near the limit, learns of B's.
			clock.Advance(2 * time.Second)
			a.tick()
			if resp := mustLimit(t, a.Service, rq); resp.Success {
				t.Fatalf("A admitted after B took the rest: %+v", resp)
			}
		})
	}
}

// TestModelsConvergeAcrossRegions: what region A admitted reaches region B
// through the global store's grow-only counts, for every model.
func TestModelsConvergeAcrossRegions(t *testing.T) {
	for name, rq := range models(t, "user", 10) {
		t.Run(name, func(t *testing.T) {
			mem := storetest.NewMemGlobal()
			clock := newFakeClock(1_700_000_010_000)
			a, b := newRegion(t, "a", mem, clock), newRegion(t, "b", mem, clock)
			// B has decided by the calendar (a row holds its code, not its
			// zone).
			if !mustLimit(t, b.Service, rq).Success {
				t.Fatal("B denied its first request")
			}
			b.flush()
			for i := range 6 {
				if !mustLimit(t, a.Service, rq).Success {
					t.Fatalf("A denied request %d", i)
				}
			}
			a.flush()
			b.sync()
			admitted := 0
			for range 10 {
				if mustLimit(t, b.Service, rq).Success {
					admitted++
				}
			}
			if admitted != 3 {
				t.Fatalf("B admitted %d after A took 6 and B 1 of 10, want 3", admitted)
			}
			b.flush()
			a.sync()
			if resp := mustLimit(t, a.Service, rq); resp.Success {
				t.Fatalf("A admitted after B took the rest: %+v", resp)
			}
		})
	}
}

// TestBucketKnownToAColdProcess: a bucket's cells hold its whole memory
// (each as long as its burst's refill), so a process that first decides
// the key after another drained it learns the debt from the regional
// store: 10 a second with bursts of 100, drained by A, then a fresh B
// three seconds later admits no more than the 30 tokens that refilled,
// whether A drained it at the start of a cell or at its end (with cells of
// the rate's second, B knew nothing older than two seconds and admitted
// 100; with cells of half the refill, drained at a cell's end, 50).
func TestBucketKnownToAColdProcess(t *testing.T) {
	r := req("k", 10, time.Second, 1)
	r.Algorithm, r.Burst = TokenBucket, 100
	cell := keyOf(&r).Period.Ms()
	for _, at := range []int64{0, cell - 100} {
		o := storetest.NewMemRegional()
		clock := newFakeClock(170_000_000*cell + at)
		a := newRegional(t, o, clock)
		for i := range 100 {
			if !mustLimit(t, a.Service, r).Success {
				t.Fatalf("A denied request %d of its burst", i)
			}
		}
		a.tick()
		clock.Advance(3 * time.Second)
		b := newRegional(t, o, clock)
		admitted := 0
		for range 100 {
			if mustLimit(t, b.Service, r).Success {
				admitted++
			}
		}
		if admitted > 30 {
			t.Fatalf("drained %d ms into a cell: B admitted %d three seconds later; 30 tokens had refilled", at, admitted)
		}
		t.Logf("drained %d ms into a cell of %d ms: B admitted %d of the 30 tokens that had refilled", at, cell, admitted)
	}
}

// TestBucketNearEmptyIsStrict: a bucket's remaining tokens are measured
// against its burst, not its rate, when an admission decides whether the
// key turns strict (reads the regional store before deciding). A bucket
// of 10 a second with bursts of 100 is strict once 20 tokens or fewer are
// left; with the rate as the yardstick it was strict only at 2.
func TestBucketNearEmptyIsStrict(t *testing.T) {
	clock := newFakeClock(600_000)
	p := newRegional(t, storetest.NewMemRegional(), clock)
	rq := req("user", 10, time.Second, 1)
	rq.Algorithm, rq.Burst = TokenBucket, 100
	for i := range 79 {
		if resp := mustLimit(t, p.Service, rq); !resp.Success {
			t.Fatalf("request %d denied: %+v", i, resp)
		}
	}
	if got := testutil.ToFloat64(p.metrics.regional.StrictActivations); got != 0 {
		t.Fatalf("strict with 21 tokens left of 100: %v activations", got)
	}
	if resp := mustLimit(t, p.Service, rq); resp.Remaining != 20 {
		t.Fatalf("the 80th request: %+v, want 20 remaining", resp)
	}
	if got := testutil.ToFloat64(p.metrics.regional.StrictActivations); got != 1 {
		t.Fatalf("strict activations with 20 tokens left of 100 = %v, want 1", got)
	}
}

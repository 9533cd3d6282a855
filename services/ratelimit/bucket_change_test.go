package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// A token bucket is one state per identity: a change of its rate, burst or
// unit keeps its tokens, as x/time/rate's SetLimitAt and SetBurstAt keep
// them. The reference here is x/time/rate itself, told of each change.

// bucketParams are a bucket's parameters: limit per duration, burst.
type bucketParams struct {
	limit int64
	dur   time.Duration
	burst int64
}

func (p bucketParams) String() string { return fmt.Sprintf("%d/%v burst %d", p.limit, p.dur, p.burst) }

// request returns a request of cost on identifier id under p.
func (p bucketParams) request(id string, cost int64) Request {
	r := req(id, p.limit, p.dur, cost)
	r.Algorithm, r.Burst = TokenBucket, p.burst
	return r
}

// every returns p's rate as x/time/rate's.
func (p bucketParams) every() rate.Limit {
	return rate.Limit(float64(p.limit) / p.dur.Seconds())
}

// referenceBucket is x/time/rate's limiter under p's parameters, full at
// at.
func referenceBucket(p bucketParams) *rate.Limiter {
	return rate.NewLimiter(p.every(), int(p.burst))
}

// changeTo tells lim of p at ms.
func changeTo(lim *rate.Limiter, p bucketParams, ms int64) {
	at := time.UnixMilli(ms)
	lim.SetLimitAt(at, p.every())
	lim.SetBurstAt(at, int(p.burst))
}

// TestBucketKeepsItsTokensWhenItsParametersChange: a bucket drained under
// one set of parameters, then asked 200 times at the same instant under
// another, admits what x/time/rate admits after SetLimitAt and SetBurstAt
// (each row once in one process, once with a second process that reads the
// bucket cold after the first decided under the new parameters: it learns
// what counts cannot tell, that a raised burst did not refill the bucket
// or what it owed in cells of another length, from the seed). Before,
// a limit of 10 raised to 11 (bursts of 100) admitted 99 more, 10 lowered
// to 9 99, a burst raised to 101 101, lowered to 50 50, the same rate as
// 600 a minute 100; lowering 20/s to 10/s (bursts of 10) admitted 5 and
// 100/s to 10/s 9, where x/time/rate admits none.
func TestBucketKeepsItsTokensWhenItsParametersChange(t *testing.T) {
	for _, tc := range []struct{ from, to bucketParams }{
		{bucketParams{10, time.Second, 100}, bucketParams{11, time.Second, 100}},
		{bucketParams{10, time.Second, 100}, bucketParams{9, time.Second, 100}},
		{bucketParams{10, time.Second, 100}, bucketParams{10, time.Second, 101}},
		{bucketParams{10, time.Second, 100}, bucketParams{10, time.Second, 50}},
		{bucketParams{10, time.Second, 100}, bucketParams{600, time.Minute, 100}},
		{bucketParams{10, time.Second, 10}, bucketParams{600, time.Minute, 600}},
		{bucketParams{20, time.Second, 10}, bucketParams{10, time.Second, 10}},
		{bucketParams{100, time.Second, 10}, bucketParams{10, time.Second, 10}},
		{bucketParams{10, time.Second, 10}, bucketParams{100, time.Second, 1000}},
		{bucketParams{1000, time.Hour, 1000}, bucketParams{10, time.Second, 10}},
	} {
		for _, cold := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v to %v, second process %v", tc.from, tc.to, cold), func(t *testing.T) {
				const start = 1_700_000_000_000
				clock := newFakeClock(start)
				o := storetest.NewMemRegional()
				a := newRegional(t, o, clock)
				ref := referenceBucket(tc.from)
				drained := 0
				for range 2 * tc.from.burst {
					if mustLimit(t, a.Service, tc.from.request("k", 1)).Success {
						drained++
					}
				}
				if want := ref.AllowN(time.UnixMilli(start), int(tc.from.burst)); !want || drained != int(tc.from.burst) {
					t.Fatalf("draining admitted %d, want the burst, %d", drained, tc.from.burst)
				}
				changeTo(ref, tc.to, start)
				s := a.Service
				if cold {
					// A decides once under the new parameters: from then on
					// the store shows what the bucket owes in its new cells.
					mustLimit(t, a.Service, tc.to.request("k", 0))
					a.tick()
					s = newRegional(t, o, clock).Service
				}
				got, want := 0, 0
				for range 200 {
					if mustLimit(t, s, tc.to.request("k", 1)).Success {
						got++
					}
					if ref.AllowN(time.UnixMilli(start), 1) {
						want++
					}
				}
				if got > want {
					t.Fatalf("admitted %d after the change; x/time/rate admits %d", got, want)
				}
				if got < want {
					t.Errorf("admitted %d after the change; x/time/rate admits %d (over-denial)", got, want)
				}
			})
		}
	}
}

// TestBucketOfTwoCallersIsOne: two callers of one identity that send a
// limit of 10 and of 11 (bursts of 100) in turn share one bucket: at most
// 100 admitted at one instant, where each had a bucket of its own (199).
// (99 is the bucket's rounding: each admission takes its refill rounded
// up to the ns, and at 11 a second the hundredth is a few ns short.)
func TestBucketOfTwoCallersIsOne(t *testing.T) {
	clock := newFakeClock(1_700_000_000_000)
	s := newTestService(t, clock)
	a, b := bucketParams{10, time.Second, 100}, bucketParams{11, time.Second, 100}
	admitted := 0
	for i := range 400 {
		p := a
		if i%2 == 1 {
			p = b
		}
		if mustLimit(t, s, p.request("k", 1)).Success {
			admitted++
		}
	}
	if admitted > 100 || admitted < 99 {
		t.Fatalf("admitted %d at one instant to callers alternating %v and %v, want the burst, 100 (99 rounded)", admitted, a, b)
	}
}

// TestBucketRateChangeRefillsAtTheNewRate: after a change the bucket
// refills at the new rate from what it held: drained at 20 a second
// (bursts of 10), lowered to 10 a second, it admits one token each 100 ms,
// as x/time/rate does.
func TestBucketRateChangeRefillsAtTheNewRate(t *testing.T) {
	const start = 1_700_000_000_000
	clock := newFakeClock(start)
	s := newTestService(t, clock)
	from, to := bucketParams{20, time.Second, 10}, bucketParams{10, time.Second, 10}
	ref := referenceBucket(from)
	for range 10 {
		mustLimit(t, s, from.request("k", 1))
	}
	ref.AllowN(time.UnixMilli(start), 10)
	changeTo(ref, to, start)
	for ms := int64(0); ms <= 2000; ms += 10 {
		clock.Set(start + ms)
		got := mustLimit(t, s, to.request("k", 1)).Success
		want := ref.AllowN(time.UnixMilli(start+ms), 1)
		if got != want {
			t.Fatalf("%d ms after the change: admitted %v, x/time/rate %v", ms, got, want)
		}
	}
}

package ratelimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
)

// creditBucket is a reference token bucket written as the textbook states
// it, in the credit form (how much refill time the bucket holds, at most
// burst refills of one token), in integer nanoseconds: independent of the
// limiter's GCRA form.
type creditBucket struct {
	perToken, capacity int64 // ns
	credit, last       int64 // ns
}

func newCreditBucket(limit, burst, durMs, now int64) *creditBucket {
	per := durMs * int64(time.Millisecond) / limit
	return &creditBucket{perToken: per, capacity: burst * per, credit: burst * per, last: now * int64(time.Millisecond)}
}

// decide returns success, the tokens left, and how many ms until the same
// request would pass (0 on success, or if it never can).
func (b *creditBucket) decide(now, cost, burst int64) (bool, int64, int64) {
	t := now * int64(time.Millisecond)
	b.credit = min(b.capacity, b.credit+(t-b.last))
	b.last = t
	need := cost * b.perToken
	if cost <= burst && need <= b.credit {
		b.credit -= need
		return true, b.credit / b.perToken, 0
	}
	if cost > burst {
		return false, b.credit / b.perToken, 0
	}
	wait := need - b.credit
	return false, b.credit / b.perToken, (wait + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

// TestTokenBucketMatchesReference drives the limiter's token bucket, the
// reference above and golang.org/x/time/rate with the same random traffic
// (rates whose refill of a token is a whole number of milliseconds, so that
// x/time/rate's floating point is exact): the same verdict for every
// request, and the reference's tokens left and retry time.
func TestTokenBucketMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trace := range 60 {
		durMs := int64(1000 * (1 + rng.IntN(4)))
		limit := []int64{1, 2, 4, 5, 8, 10, 20, 25, 50, 100}[rng.IntN(10)]
		burst := int64(0)
		if rng.IntN(3) > 0 {
			burst = 1 + rng.Int64N(3*limit)
		}
		wantBurst := burst
		if wantBurst == 0 {
			wantBurst = limit
		}
		start := 1_700_000_000_000 + rng.Int64N(1_000_000)
		clock := newFakeClock(start)
		s := newTestService(t, clock)
		ref := newCreditBucket(limit, wantBurst, durMs, start)
		lim := rate.NewLimiter(rate.Limit(float64(limit)*1000/float64(durMs)), int(wantBurst))
		lim.SetBurstAt(time.UnixMilli(start), int(wantBurst))
		for i := range 500 {
			clock.Advance(time.Duration(rng.Int64N(2*durMs/limit+1)) * time.Millisecond)
			cost := 1 + rng.Int64N(3)
			if rng.IntN(30) == 0 {
				cost = wantBurst + 1
			}
			now := clock.ms.Load()
			r := req("k", limit, time.Duration(durMs)*time.Millisecond, cost)
			r.Algorithm, r.Burst = TokenBucket, burst
			got := mustLimit(t, s, r)
			ok, remaining, retry := ref.decide(now, cost, wantBurst)
			xok := lim.AllowN(time.UnixMilli(now), int(cost))
			if got.Success != ok || xok != ok || got.Remaining != remaining || got.RetryAfter.Milliseconds() != retry || got.Algorithm != TokenBucket {
				t.Fatalf("trace %d request %d (t=%d limit=%d per %d ms burst=%d cost=%d): got success %v remaining %d retry %v; reference %v %d %d ms; x/time/rate %v",
					trace, i, now-start, limit, durMs, wantBurst, cost, got.Success, got.Remaining, got.RetryAfter, ok, remaining, retry, xok)
			}
		}
	}
}

// TestTokenBucketRefills: 10 a second with bursts of 100 admits 100 at
// once and then 10 a second, where a sliding window of 100 per 10 s admits
// nothing more until the burst slides out.
func TestTokenBucketRefills(t *testing.T) {
	clock := newFakeClock(1_700_000_000_000)
	s := newTestService(t, clock)
	bucket := req("b", 10, time.Second, 1)
	bucket.Algorithm, bucket.Burst = TokenBucket, 100
	window := req("w", 100, 10*time.Second, 1)
	count := func(r Request, n int) (admitted int) {
		for range n {
			if mustLimit(t, s, r).Success {
				admitted++
			}
		}
		return admitted
	}
	if b, w := count(bucket, 150), count(window, 150); b != 100 || w != 100 {
		t.Fatalf("at once: bucket %d, window %d; want 100 and 100", b, w)
	}
	clock.Advance(time.Second)
	if b, w := count(bucket, 50), count(window, 50); b != 10 || w != 0 {
		t.Fatalf("a second later: bucket %d, window %d; want 10 and 0", b, w)
	}
	resp := mustLimit(t, s, bucket)
	if resp.Success || resp.RetryAfter != 100*time.Millisecond || resp.Remaining != 0 {
		t.Fatalf("empty bucket: %+v, want denied with retryAfter 100ms", resp)
	}
	clock.Advance(100 * time.Millisecond)
	if resp := mustLimit(t, s, bucket); !resp.Success {
		t.Fatalf("after retryAfter: %+v, want admitted", resp)
	}
	// Reset is when the bucket is full again: 100 tokens at 10 a second.
	if resp := mustLimit(t, s, Request{Workspace: "ws", Namespace: "ns", Identifier: "b", Limit: 10, Duration: time.Second,
		Algorithm: TokenBucket, Burst: 100}); resp.Reset.Sub(clock.Now()) != 10*time.Second {
		t.Fatalf("reset %v after now, want 10s", resp.Reset.Sub(clock.Now()))
	}
}

// TestFixedWindowMatchesACounterPerPeriod: a fixed window is a counter
// per window of duration, reset at its end.
func TestFixedWindowMatchesACounterPerPeriod(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trace := range 40 {
		durMs := int64(1000 * (1 + rng.IntN(5)))
		limit := 1 + rng.Int64N(30)
		clock := newFakeClock(1_700_000_000_000 + rng.Int64N(1_000_000))
		s := newTestService(t, clock)
		counts := map[int64]int64{}
		for i := range 400 {
			clock.Advance(time.Duration(rng.Int64N(durMs/6)) * time.Millisecond)
			cost := rng.Int64N(4)
			if rng.IntN(25) == 0 {
				cost = limit + 1
			}
			now := clock.ms.Load()
			seq := now / durMs
			ok := cost <= limit && counts[seq]+cost <= limit
			var remaining, retry int64
			if ok {
				counts[seq] += cost
				remaining = limit - counts[seq]
			} else {
				remaining = limit - counts[seq]
				if cost <= limit {
					retry = (seq+1)*durMs - now
				}
			}
			r := req("k", limit, time.Duration(durMs)*time.Millisecond, cost)
			r.Algorithm = FixedWindow
			got := mustLimit(t, s, r)
			if got.Success != ok || got.Remaining != remaining || got.RetryAfter.Milliseconds() != retry ||
				got.Reset.UnixMilli() != (seq+1)*durMs || got.Algorithm != FixedWindow {
				t.Fatalf("trace %d request %d: got %+v, want success %v remaining %d retry %d ms reset %d",
					trace, i, got, ok, remaining, retry, (seq+1)*durMs)
			}
		}
	}
}

// TestCalendarWindowsFollowTheWallClock: a calendar window is a counter
// per period of the zone's calendar, reset at the next period's first
// instant, through a Berlin day of 23 and of 25 hours, February of a
// common and of a leap year, and a year's end; the reference computes the
// periods with package time alone.
func TestCalendarWindowsFollowTheWallClock(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	type periodOf func(time.Time) (key string, next time.Time)
	day := func(t time.Time) (string, time.Time) {
		l := t.In(berlin)
		y, m, d := l.Date()
		return l.Format("2006-01-02"), time.Date(y, m, d+1, 0, 0, 0, 0, berlin)
	}
	month := func(t time.Time) (string, time.Time) {
		l := t.In(berlin)
		y, m, _ := l.Date()
		return l.Format("2006-01"), time.Date(y, m+1, 1, 0, 0, 0, 0, berlin)
	}
	year := func(t time.Time) (string, time.Time) {
		y := t.In(time.UTC).Year()
		return t.In(time.UTC).Format("2006"), time.Date(y+1, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	for _, tc := range []struct {
		name     string
		unit     calendar.Unit
		zone     string
		from, to time.Time
		step     time.Duration
		ref      periodOf
	}{
		{"Berlin days of 23 hours", calendar.Day, "Europe/Berlin",
			time.Date(2026, 3, 27, 12, 0, 0, 0, berlin), time.Date(2026, 3, 31, 0, 0, 0, 0, berlin), 17 * time.Minute, day},
		{"Berlin days of 25 hours", calendar.Day, "Europe/Berlin",
			time.Date(2026, 10, 23, 12, 0, 0, 0, berlin), time.Date(2026, 10, 27, 0, 0, 0, 0, berlin), 17 * time.Minute, day},
		{"February of a common year", calendar.Month, "Europe/Berlin",
			time.Date(2027, 1, 20, 0, 0, 0, 0, berlin), time.Date(2027, 3, 10, 0, 0, 0, 0, berlin), 7 * time.Hour, month},
		{"February of a leap year", calendar.Month, "Europe/Berlin",
			time.Date(2028, 1, 20, 0, 0, 0, 0, berlin), time.Date(2028, 3, 10, 0, 0, 0, 0, berlin), 7 * time.Hour, month},
		{"a year's end in UTC", calendar.Year, "",
			time.Date(2027, 12, 30, 0, 0, 0, 0, time.UTC), time.Date(2028, 1, 3, 0, 0, 0, 0, time.UTC), 3 * time.Hour, year},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := calendar.New(tc.unit, tc.zone)
			if err != nil {
				t.Fatal(err)
			}
			clock := newFakeClock(tc.from.UnixMilli())
			s := newTestService(t, clock)
			const limit = 7
			counts := map[string]int64{}
			periods := 0
			for now := tc.from; now.Before(tc.to); now = now.Add(tc.step) {
				clock.Set(now.UnixMilli())
				key, next := tc.ref(now)
				if _, seen := counts[key]; !seen {
					periods++
				}
				ok := counts[key]+1 <= limit
				if ok {
					counts[key]++
				}
				got := mustLimit(t, s, Request{Workspace: "ws", Namespace: "ns", Identifier: "k", Limit: limit, Cost: 1, Calendar: p})
				want := Response{Success: ok, Limit: limit, Remaining: limit - counts[key], Reset: next, Algorithm: FixedWindow}
				if !ok {
					want.RetryAfter = next.Sub(now)
				}
				if got.Success != want.Success || got.Remaining != want.Remaining || !got.Reset.Equal(want.Reset) ||
					got.RetryAfter != want.RetryAfter || got.Algorithm != FixedWindow {
					t.Fatalf("at %v (%s): got %+v, want %+v", now.In(berlin), key, got, want)
				}
			}
			if periods < 2 {
				t.Fatalf("the trace saw %d periods; it must cross a boundary", periods)
			}
		})
	}
}

// TestMultiLimitMixesModels: a MultiLimit of a token bucket and a fixed
// window is all or nothing: when the window denies, the bucket keeps its
// tokens.
func TestMultiLimitMixesModels(t *testing.T) {
	clock := newFakeClock(1_700_000_000_000)
	s := newTestService(t, clock)
	bucket := req("k", 10, time.Second, 1)
	bucket.Algorithm, bucket.Burst = TokenBucket, 5
	window := req("k", 3, time.Minute, 1)
	window.Algorithm = FixedWindow
	for i := range 5 {
		resp, err := s.MultiLimit(context.Background(), []Request{bucket, window})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Passed != (i < 3) {
			t.Fatalf("call %d: passed %v", i, resp.Passed)
		}
		if got := resp.Results[0]; got.Algorithm != TokenBucket || got.Remaining != int64(5-min(i+1, 3)) && resp.Passed {
			t.Fatalf("call %d: bucket %+v", i, got)
		}
		if !resp.Passed && resp.Results[0].Remaining != 2 {
			t.Fatalf("call %d: the failed batch left the bucket %d tokens, want the 2 it held", i, resp.Results[0].Remaining)
		}
	}
	// The bucket alone still holds the 2 tokens the failed batches did not take.
	for i := range 3 {
		if got := mustLimit(t, s, bucket); got.Success != (i < 2) {
			t.Fatalf("bucket alone, call %d: %+v", i, got)
		}
	}
}

// TestModelValidation: each rule of the models names its field.
func TestModelValidation(t *testing.T) {
	month, err := calendar.New(calendar.Month, "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	base := req("k", 10, time.Second, 1)
	for _, tc := range []struct {
		name   string
		change func(*Request)
		field  string
	}{
		{"unknown algorithm", func(r *Request) { r.Algorithm = 7 }, "algorithm"},
		{"burst of a window", func(r *Request) { r.Burst = 5 }, "burst"},
		{"negative burst", func(r *Request) { r.Algorithm, r.Burst = TokenBucket, -1 }, "burst"},
		{"burst above the cap", func(r *Request) { r.Algorithm, r.Burst = TokenBucket, MaxLimit+1 }, "burst"},
		{"calendar with a duration", func(r *Request) { r.Calendar = month }, "duration"},
		{"calendar of a bucket", func(r *Request) { r.Calendar, r.Duration, r.Algorithm = month, 0, TokenBucket }, "calendar"},
		{"reserve on a calendar", func(r *Request) { r.Calendar, r.Duration, r.Reserve = month, 0, true }, "reserve"},
		{"reserve on a bucket", func(r *Request) { r.Algorithm, r.Reserve = TokenBucket, true }, "reserve"},
	} {
		r := base
		tc.change(&r)
		clock := newFakeClock(1_700_000_000_000)
		s := newTestService(t, clock)
		_, err := s.Limit(context.Background(), r)
		var inv *invalid.Error
		if !errors.As(err, &inv) || inv.Field != tc.field {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.field)
		}
		if s.windows.Len() != 0 {
			t.Errorf("%s: a refused request made a window", tc.name)
		}
	}
	// A month in Berlin is allowed beyond the 30 days a duration may last.
	r := base
	r.Calendar, r.Duration = month, 0
	s := newTestService(t, newFakeClock(1_700_000_000_000))
	if resp := mustLimit(t, s, r); !resp.Success || resp.Reset.Sub(time.UnixMilli(1_700_000_000_000)) <= 0 ||
		!strings.Contains(resp.Algorithm.String(), "fixed") {
		t.Fatalf("a calendar month: %+v", resp)
	}
}

// TestJanitorKeepsABucketUntilItIsFull: a bucket's level is in no store
// beyond its last two cells, so the janitor keeps its window, idle cells
// and all, until every token has refilled; then both go. (A bucket's cells
// are as long as its refill and its debt is bounded, so this is a safety
// net: the bucket's instant is set by hand past its cells' life.)
func TestJanitorKeepsABucketUntilItIsFull(t *testing.T) {
	clock := newFakeClock(1_700_000_000_000)
	s := newTestService(t, clock)
	r := req("k", 1, time.Second, 1)
	r.Algorithm = TokenBucket
	mustLimit(t, s, r)
	w := s.windows.Find(ptr(keyOf(&r)))
	s.windows.OweUntil(w, specOf(&r), clock.ms.Load(), (clock.ms.Load()+60_000)*int64(time.Millisecond))
	clock.Advance(10 * time.Second) // the cells are idle; the bucket owes 50 s of refill
	if n := s.windows.EvictIdle(clock.Now()); n != 0 {
		t.Fatalf("evicted %d windows of a bucket still refilling", n)
	}
	if resp := mustLimit(t, s, r); resp.Success {
		t.Fatalf("the bucket forgot its debt: %+v", resp)
	}
	clock.Advance(60 * time.Second)
	n := s.windows.EvictIdle(clock.Now())
	if buckets, ids := s.windows.BucketCounts(); n != 1 || buckets != 0 || ids != 0 {
		t.Fatalf("a full bucket: %d evicted, %d buckets (%d identities) left; want 1 and 0", n, buckets, ids)
	}
}

func ptr[T any](v T) *T { return &v }

// TestBucketDebtIsBounded: what is counted whatever the verdict (reports,
// Envoy's hits over the limit) takes a bucket at most one burst past empty:
// 100,000 reports on a bucket of one a day, and reports of the largest
// cost, leave it refilled within two days of the last, never wrapped round
// to full.
func TestBucketDebtIsBounded(t *testing.T) {
	clock := newFakeClock(1_700_000_000_000)
	s := newTestService(t, clock)
	r := req("k", 1, 24*time.Hour, 1)
	r.Algorithm, r.Report = TokenBucket, true
	for range 100_000 {
		mustLimit(t, s, r)
	}
	big := r
	big.Identifier, big.Cost = "big", MaxCost
	for range 10 {
		if resp := mustLimit(t, s, big); resp.Success || resp.Reset.Before(clock.Now()) {
			t.Fatalf("a report of the largest cost: %+v", resp)
		}
	}
	check := r
	check.Report, check.Cost = false, 1
	if resp := mustLimit(t, s, check); resp.Success || resp.RetryAfter > 49*time.Hour {
		t.Fatalf("after 100,000 reports: %+v, want denied and a wait of at most two days", resp)
	}
	clock.Advance(48*time.Hour + time.Minute)
	for _, id := range []string{"k", "big"} {
		check.Identifier = id
		if resp := mustLimit(t, s, check); !resp.Success {
			t.Fatalf("%s two days after its last report: %+v, want admitted", id, resp)
		}
	}
}

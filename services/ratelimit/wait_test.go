package ratelimit

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// Booked waits (Request.MaxWait), held to references written from the
// rules rather than from the models: x/time/rate's Reservation for a token
// bucket, and for a sliding window a scheduler that finds, by search over
// the instants of the current cell, the first at which the request,
// counted with everything booked before it, fits.

// TestBookedWaitsOnABucket: on one process, every request of a random
// trace is answered as x/time/rate's ReserveN answers it: admitted at
// once, booked with the reservation's delay (to the ms, rounded up) when
// that is within MaxWait and one burst's refill, or refused (the
// reservation cancelled); the waits of one key never go backwards.
func TestBookedWaitsOnABucket(t *testing.T) {
	for _, seed := range traceSeeds(t, 4) {
		rng := rand.New(rand.NewPCG(seed, 7))
		start := int64(1_700_000_000_000) + rng.Int64N(1<<30)
		clock := newFakeClock(start)
		s, err := New("test", WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		// A rate whose token takes whole ms, so that both sides are
		// exact: 10 a second, burst 5.
		const limit, burst = 10, 5
		ref := rate.NewLimiter(rate.Every(100*time.Millisecond), burst)
		maxWait := time.Duration(1+rng.Int64N(800)) * time.Millisecond
		var lastProceed int64
		booked := 0
		for i := range *traceBudget / 4 {
			clock.Advance(time.Duration(rng.Int64N(120)) * time.Millisecond)
			now := clock.Now()
			cost := 1 + rng.Int64N(3)
			got, err := s.Limit(context.Background(), Request{Workspace: "ws", Namespace: "n", Identifier: "k", Limit: limit,
				Duration: time.Second, Algorithm: TokenBucket, Burst: burst, Cost: cost, MaxWait: maxWait})
			if err != nil {
				t.Fatal(err)
			}
			r := ref.ReserveN(now, int(cost))
			delay := r.DelayFrom(now)
			want := r.OK() && delay <= min(maxWait, burst*100*time.Millisecond)
			if !want {
				r.CancelAt(now)
			}
			wantWait := (delay + time.Millisecond - 1).Truncate(time.Millisecond)
			if !want {
				wantWait = 0
			}
			if got.Success != want || got.Wait != wantWait || (got.Success && got.RetryAfter != 0) {
				t.Fatalf("seed %d, request %d at +%d ms (cost %d, max wait %v): %+v; x/time/rate: admitted %v, delay %v",
					seed, i, now.UnixMilli()-start, cost, maxWait, got, want, delay)
			}
			if got.Success {
				proceed := now.Add(got.Wait).UnixMilli()
				if proceed < lastProceed {
					t.Fatalf("seed %d, request %d: proceeds at %d, before one booked earlier (%d)", seed, i, proceed, lastProceed)
				}
				lastProceed = proceed
				if got.Wait > 0 {
					booked++
				}
			}
		}
		if booked == 0 {
			t.Fatalf("seed %d: nothing was booked", seed)
		}
	}
}

// slidingRef is the reference sliding window: counts per fixed cell of
// the requests admitted or booked, each in the cell it proceeds in.
type slidingRef struct {
	limit, dur int64
	cells      map[int64]int64
}

// effective is the sliding window's count at at with extra more in its
// cell: the cell's count and the previous cell's, weighted by how much of
// it the window still overlaps, truncated.
func (r *slidingRef) effective(at, extra int64) int64 {
	seq := at / r.dur
	elapsed := at - seq*r.dur
	prev := r.cells[seq-1]
	return r.cells[seq] + extra + prev*(r.dur-elapsed)/r.dur
}

// decide returns when a request of cost at now proceeds: now if it fits,
// the first instant of now's cell within maxWait at which it fits counted
// with everything before it, or -1.
func (r *slidingRef) decide(now, cost, maxWait int64) int64 {
	if cost > r.limit {
		return -1
	}
	if r.effective(now, cost) <= r.limit {
		return now
	}
	end := (now/r.dur + 1) * r.dur // the cell's end: booked within it
	lo, hi := now, min(end-1, now+maxWait)
	if r.effective(hi, cost) > r.limit {
		return -1
	}
	for lo < hi { // the weight only falls: the first instant that fits
		mid := lo + (hi-lo)/2
		if r.effective(mid, cost) <= r.limit {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// TestBookedWaitsOnASlidingWindow: on one process, every request of a
// random trace is admitted, booked or refused as the reference scheduler
// says, to the ms; and at every instant a request proceeds, the requests
// that proceeded by then hold the sliding window within its limit.
func TestBookedWaitsOnASlidingWindow(t *testing.T) {
	for _, seed := range traceSeeds(t, 4) {
		rng := rand.New(rand.NewPCG(seed, 8))
		clock := newFakeClock(1_700_000_000_000 + rng.Int64N(1<<30))
		s, err := New("test", WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		limit := 5 + rng.Int64N(50)
		dur := int64(1000 * (1 + rng.Int64N(10)))
		ref := &slidingRef{limit: limit, dur: dur, cells: map[int64]int64{}}
		maxWait := 1 + rng.Int64N(dur)
		type proceeded struct{ at, cost int64 }
		var all []proceeded
		var lastBooked int64
		booked := 0
		for i := range *traceBudget / 4 {
			clock.Advance(time.Duration(rng.Int64N(3*dur/limit+1)) * time.Millisecond)
			now := clock.Now().UnixMilli()
			cost := 1 + rng.Int64N(3)
			got, err := s.Limit(context.Background(), Request{Workspace: "ws", Namespace: "n", Identifier: "k", Limit: limit,
				Duration: time.Duration(dur) * time.Millisecond, Cost: cost, MaxWait: time.Duration(maxWait) * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			at := ref.decide(now, cost, maxWait)
			if got.Success != (at >= 0) || (at >= 0 && (got.Wait != time.Duration(at-now)*time.Millisecond || got.RetryAfter != 0)) {
				t.Fatalf("seed %d, request %d (limit %d per %d ms, cost %d, max wait %d ms): %+v; the reference: proceed at +%d ms",
					seed, i, limit, dur, cost, maxWait, got, at-now)
			}
			if at < 0 {
				continue
			}
			ref.cells[now/dur] += cost // counted where it is decided: at proceeds in the same cell
			all = append(all, proceeded{at, cost})
			if at > now {
				booked++
				if at < lastBooked && at/dur == lastBooked/dur {
					t.Fatalf("seed %d, request %d: booked for %d, before one booked earlier in its cell (%d)", seed, i, at, lastBooked)
				}
				lastBooked = at
			}
		}
		// Every instant a request proceeds, what proceeded by then.
		for _, p := range all {
			by := &slidingRef{limit: limit, dur: dur, cells: map[int64]int64{}}
			for _, q := range all {
				if q.at <= p.at && q.at/dur >= p.at/dur-1 {
					by.cells[q.at/dur] += q.cost
				}
			}
			if e := by.effective(p.at, 0); e > limit {
				t.Fatalf("seed %d: at %d the requests that proceeded count %d, past the limit %d", seed, p.at, e, limit)
			}
		}
		if booked == 0 {
			t.Fatalf("seed %d: nothing was booked", seed)
		}
	}
}

// TestMaxWaitRules: what may wait.
func TestMaxWaitRules(t *testing.T) {
	base := Request{Workspace: "ws", Namespace: "n", Identifier: "k", Limit: 1, Duration: time.Second, Cost: 1, MaxWait: time.Second}
	for _, c := range []struct {
		edit func(*Request)
		want string
	}{
		{func(r *Request) { r.MaxWait = -time.Second }, "max_wait: must be between 0 and"},
		{func(r *Request) { r.Algorithm = FixedWindow }, "max_wait: must be 0 with a fixed window or a calendar"},
		{func(r *Request) { r.Report = true }, "max_wait: must be 0 in a report"},
		{func(r *Request) { r.Reserve = true }, "max_wait: must be 0 with reserve"},
	} {
		r := base
		c.edit(&r)
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", r, err, c.want)
		}
	}
}

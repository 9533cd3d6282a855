package ratelimit

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// Booked waits (Request.MaxWait), held to references written from the
// rules rather than from the models: x/time/rate's Reservation for a token
// bucket, and for a sliding or fixed window a scheduler that finds, by
// search over the instants of the current cell and the next, the first at
// which the request, counted with everything booked before it, fits.

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

// windowRef is the reference window, sliding or fixed: counts per fixed
// cell of the requests admitted or booked, each in the cell it proceeds
// in.
type windowRef struct {
	limit, dur int64
	fixed      bool
	cells      map[int64]int64
}

// effective is the window's count at at with extra more in its cell: a
// fixed window's cell count; a sliding window's, and the previous cell's
// weighted by how much of it the window still overlaps, truncated.
func (r *windowRef) effective(at, extra int64) int64 {
	seq := at / r.dur
	if r.fixed {
		return r.cells[seq] + extra
	}
	elapsed := at - seq*r.dur
	prev := r.cells[seq-1]
	return r.cells[seq] + extra + prev*(r.dur-elapsed)/r.dur
}

// first returns the first instant from lo to hi at which a request of
// cost, with extra more in its cell, fits, or -1: the window's count
// only falls within a cell (its previous cell's weight), so a search.
func (r *windowRef) first(lo, hi, cost, extra int64) int64 {
	if lo > hi || r.effective(hi, cost+extra) > r.limit {
		return -1
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if r.effective(mid, cost+extra) <= r.limit {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// decide returns when a request of cost at now proceeds: now if it fits,
// else the first instant within maxWait at which it fits counted with
// everything booked before it — in now's cell (a sliding window), then in
// the next cell — or -1. What was booked into a sliding window's next
// cell counts in now's too: capacity it holds is not admitted now.
func (r *windowRef) decide(now, cost, maxWait int64) int64 {
	if cost > r.limit {
		return -1
	}
	seq := now / r.dur
	end := (seq + 1) * r.dur
	ahead := r.cells[seq+1]
	if r.fixed {
		ahead = 0 // a fixed window's cells count apart
	}
	if r.effective(now, cost+ahead) <= r.limit {
		return now
	}
	if !r.fixed {
		if at := r.first(now, min(end-1, now+maxWait), cost, ahead); at >= 0 {
			return at
		}
	}
	return r.first(end, min(end+r.dur-1, now+maxWait), cost, 0)
}

// TestBookedWaitsOnAWindow: on one process, every request of a random
// trace on a sliding or a fixed window is admitted, booked or refused as
// the reference scheduler says, to the ms (a refusal's retryAfter, the
// first instant it would pass if nothing else came); at every instant a request
// proceeds, the requests that proceeded by then hold the window within
// its limit; and a key's bookings never go backwards.
func TestBookedWaitsOnAWindow(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		for _, seed := range traceSeeds(t, 4) {
			rng := rand.New(rand.NewPCG(seed, 8))
			clock := newFakeClock(1_700_000_000_000 + rng.Int64N(1<<30))
			s, err := New("test", WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			limit := 5 + rng.Int64N(50)
			dur := int64(1000 * (1 + rng.Int64N(10)))
			ref := &windowRef{limit: limit, dur: dur, fixed: fixed, cells: map[int64]int64{}}
			maxWait := 1 + rng.Int64N(dur)
			alg := SlidingWindow
			if fixed {
				alg = FixedWindow
			}
			type proceeded struct{ at, cost int64 }
			var all []proceeded
			var lastBooked int64
			booked, ahead := 0, 0
			for i := range *traceBudget / 4 {
				clock.Advance(time.Duration(rng.Int64N(3*dur/limit+1)) * time.Millisecond)
				now := clock.Now().UnixMilli()
				cost := 1 + rng.Int64N(3)
				got, err := s.Limit(context.Background(), Request{Workspace: "ws", Namespace: "n", Identifier: "k", Limit: limit,
					Duration: time.Duration(dur) * time.Millisecond, Algorithm: alg, Cost: cost, MaxWait: time.Duration(maxWait) * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				at := ref.decide(now, cost, maxWait)
				if got.Success != (at >= 0) || (at >= 0 && (got.Wait != time.Duration(at-now)*time.Millisecond || got.RetryAfter != 0)) {
					t.Fatalf("%v, seed %d, request %d at %d (limit %d per %d ms, cost %d, max wait %d ms): %+v; the reference: proceed at +%d ms",
						alg, seed, i, now, limit, dur, cost, maxWait, got, at-now)
				}
				if at < 0 {
					// retryAfter: the first instant at which it would pass
					// if nothing else came, to the ms.
					retry := now + got.RetryAfter.Milliseconds()
					if got.RetryAfter <= 0 || ref.decide(retry, cost, 0) != retry || ref.decide(retry-1, cost, 0) >= 0 {
						t.Fatalf("%v, seed %d, request %d at %d (limit %d per %d ms, cost %d): denied with retryAfter %v, not the first instant it passes",
							alg, seed, i, now, limit, dur, cost, got.RetryAfter)
					}
					continue
				}
				ref.cells[at/dur] += cost // counted where it proceeds
				all = append(all, proceeded{at, cost})
				if at > now {
					booked++
					if at/dur > now/dur {
						ahead++
					}
					if at < lastBooked {
						t.Fatalf("%v, seed %d, request %d: booked for %d, before one booked earlier (%d)", alg, seed, i, at, lastBooked)
					}
					lastBooked = at
				}
			}
			// Every instant a request proceeds, what proceeded by then.
			for _, p := range all {
				by := &windowRef{limit: limit, dur: dur, fixed: fixed, cells: map[int64]int64{}}
				for _, q := range all {
					if q.at <= p.at && q.at/dur >= p.at/dur-1 {
						by.cells[q.at/dur] += q.cost
					}
				}
				if e := by.effective(p.at, 0); e > limit {
					t.Fatalf("%v, seed %d: at %d the requests that proceeded count %d, past the limit %d", alg, seed, p.at, e, limit)
				}
			}
			if booked == 0 || ahead == 0 {
				t.Fatalf("%v, seed %d: %d booked, %d of them into the next cell", alg, seed, booked, ahead)
			}
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
		{func(r *Request) { *r = monthIn(t, "UTC"); r.MaxWait = time.Second }, "max_wait: must be 0 with a calendar"},
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

// TestBookedAheadReachesTheRegion: a request booked into the next cell of
// a sliding window counts, in every process of the region, against the
// current cell too: A spends 6 of 10 and books 5 into the next minute
// (they proceed 1 ms into it, where the 6 weigh 5); B, reading the key
// cold after A's replay, refuses the single unit it would otherwise admit
// now. In the next minute the booking is counted where it proceeds.
func TestBookedAheadReachesTheRegion(t *testing.T) {
	o := storetest.NewMemRegional()
	clock := newFakeClock(600_000 + 30_000)
	a, b := newRegional(t, o, clock), newRegional(t, o, clock)
	rq := req("user", 10, time.Minute, 6)
	if !mustLimit(t, a.Service, rq).Success {
		t.Fatal("A denied 6 of 10")
	}
	rq.Cost, rq.MaxWait = 5, time.Minute
	got := mustLimit(t, a.Service, rq)
	if !got.Success || got.Wait != 30_001*time.Millisecond {
		t.Fatalf("A's booking of 5: %+v, want booked 30.001 s ahead, 1 ms into the next minute", got)
	}
	a.tick()
	if n := o.Count(cellOf(rq, 660_000)); n != 5 {
		t.Fatalf("the store holds %d in the next minute after A's replay, want the 5 booked", n)
	}
	one := req("user", 10, time.Minute, 1)
	if got := mustLimit(t, b.Service, one); got.Success {
		t.Fatalf("B admitted 1 where 6 were spent and 5 booked ahead: %+v", got)
	}
	clock.Set(660_001)
	a.tick()
	b.tick()
	// 1 ms into the next minute: the 5 booked and the 6 weighted, 5.
	if got := mustLimit(t, b.Service, one); got.Success {
		t.Fatalf("B admitted 1 where the booking proceeds: %+v", got)
	}
	clock.Set(660_000 + 30_000) // the 6 weigh 3: 5 + 3 + 1 fits, 5 + 3 + 3 does not
	if got := mustLimit(t, b.Service, one); !got.Success || got.Remaining != 1 {
		t.Fatalf("B at half the minute: %+v, want admitted with 1 remaining", got)
	}
}

// TestBookingAheadRacesAnAdmission: a request booked into the next cell
// of a sliding window between an admission's read of the cells and its
// count, which the booking did not see: the admission, reading what is
// booked ahead after it counts, takes its count back and decides again,
// so that the current cell cannot outweigh the booking when it proceeds.
// (Counted with the booking unseen, the 30 now and the 50 before weigh
// 65 at the booking's instant, beside its 60.)
func TestBookingAheadRacesAnAdmission(t *testing.T) {
	const dur = 60_000
	start := int64(1_700_000_000_000/dur*dur + dur)
	clock := newFakeClock(start + 20_000)
	s := newTestService(t, clock)
	r := Request{Workspace: "ws", Namespace: "n", Identifier: "k", Limit: 100, Duration: dur * time.Millisecond, Cost: 60}
	mustLimit(t, s, r) // the previous cell: 60, weighing 10 at 50 s
	clock.Set(start + dur + 50_000)
	r.Cost = 50
	mustLimit(t, s, r)
	var booked Response
	s.windows.BeforeCAS = func(*cells.Window, *cells.Cell, int) {
		s.windows.BeforeCAS = nil
		b := r
		b.Cost, b.MaxWait = 60, time.Minute
		booked = mustLimit(t, s, b)
	}
	r.Cost = 30
	got := mustLimit(t, s, r)
	// At 50 s: the 50 counted, the 60 before weigh 10: the booking fits
	// neither now nor in this cell, and 10.801 s into the next one the 50
	// weigh 40 beside its 60.
	if !booked.Success || booked.Wait != 20_801*time.Millisecond {
		t.Fatalf("the booking: %+v, want booked 20.801 s ahead", booked)
	}
	if got.Success {
		t.Fatalf("the admission raced by the booking: %+v, want denied (50 + 60 booked ahead + 10 + 30 > 100)", got)
	}
}

// TestRefusedReportPastAWindowBookedFull: a fixed window's refused report
// (Envoy's hits, counted whatever the verdict) answers the end of the
// next window when what is booked into it leaves no room, as a refused
// request does.
func TestRefusedReportPastAWindowBookedFull(t *testing.T) {
	clock := newFakeClock(1_800_000_000_000 + 20_000) // 20 s into a minute
	s := newTestService(t, clock)
	r := Request{Workspace: "ws", Namespace: "n", Identifier: "k", Limit: 1, Duration: time.Minute, Algorithm: FixedWindow, Cost: 1}
	mustLimit(t, s, r)
	r.MaxWait = time.Minute
	if got := mustLimit(t, s, r); !got.Success || got.Wait != 40*time.Second {
		t.Fatalf("the booking: %+v, want booked into the next minute", got)
	}
	r.MaxWait, r.Report = 0, true
	if got := mustLimit(t, s, r); got.Success || got.RetryAfter != 100*time.Second {
		t.Fatalf("a report past both: %+v, want refused until the minute after the booked one", got)
	}
}

package ratelimit

import (
	"math/rand/v2"
	"testing"
	"time"
)

// reference is a reference limiter written straight from the formula, with
// exact arithmetic, no concurrency and a brute-force retryAfter, to check the real one
// against.
type reference struct {
	counts map[int64]int64 // seq -> count, for one key
	dur    int64
}

func (m *reference) effective(now, cost int64) int64 {
	seq := now / m.dur
	elapsed := now - seq*m.dur
	// prev*(1-elapsed/dur) = prev*(dur-elapsed)/dur; the traces keep counts
	// small enough for int64, and integer division truncates exactly.
	return m.counts[seq] + m.counts[seq-1]*(m.dur-elapsed)/m.dur + cost
}

func (m *reference) decide(now, limit, cost int64) (ok bool, remaining, reset, retry int64) {
	seq := now / m.dur
	eff := m.effective(now, cost)
	reset = (seq + 1) * m.dur
	if cost <= limit && eff <= limit {
		m.counts[seq] += cost
		return true, limit - eff, reset, 0
	}
	remaining = max(0, limit-(eff-cost))
	if cost > limit {
		return false, remaining, reset, 0
	}
	// Brute force: the first millisecond at which the same request passes
	// with no other traffic.
	for dt := int64(1); ; dt++ {
		if m.effective(now+dt, cost) <= limit {
			return false, remaining, reset, dt
		}
	}
}

// TestMatchesModel drives the limiter and the reference model with the same
// random trace and requires identical answers for every request: the single
// process limiter is the formula, exactly.
func TestMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trace := 0; trace < 40; trace++ {
		dur := int64(1000 + rng.IntN(3)*1000)
		limit := int64(1 + rng.IntN(40))
		clock := newFakeClock(int64(rng.IntN(1_000_000)))
		s := newTestService(t, clock)
		m := &reference{counts: map[int64]int64{}, dur: dur}
		for i := 0; i < 400; i++ {
			clock.Advance(time.Duration(rng.IntN(int(dur/8))) * time.Millisecond)
			cost := int64(rng.IntN(4))
			if rng.IntN(20) == 0 {
				cost = limit + 1
			}
			now := clock.ms.Load()
			resp := mustLimit(t, s, req("k", limit, time.Duration(dur)*time.Millisecond, cost))
			ok, remaining, reset, retry := m.decide(now, limit, cost)
			got := [4]int64{b2i(resp.Success), resp.Remaining, resp.Reset.UnixMilli(), resp.RetryAfter.Milliseconds()}
			want := [4]int64{b2i(ok), remaining, reset, retry}
			if got != want {
				t.Fatalf("trace %d request %d (t=%d limit=%d dur=%d cost=%d): got [success remaining reset retryAfter] %v, want %v",
					trace, i, now, limit, dur, cost, got, want)
			}
		}
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestRetryAfterIsTight checks on random states that waiting exactly
// retryAfter lets a lone retry pass and waiting one millisecond less does
// not.
func TestRetryAfterIsTight(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		dur := time.Duration(1000+rng.IntN(5000)) * time.Millisecond
		limit := int64(1 + rng.IntN(1000))
		prevUse := rng.Int64N(limit + 1)
		curUse := rng.Int64N(limit + 1)
		at := rng.Int64N(dur.Milliseconds())
		cost := 1 + rng.Int64N(limit)
		build := func() (*Service, *fakeClock) {
			clock := newFakeClock(100 * dur.Milliseconds())
			s := newTestService(t, clock)
			if prevUse > 0 {
				mustLimit(t, s, req("k", limit, dur, prevUse))
			}
			clock.Set(101*dur.Milliseconds() + at)
			if curUse > 0 {
				mustLimit(t, s, req("k", limit, dur, curUse))
			}
			return s, clock
		}
		s, clock := build()
		resp := mustLimit(t, s, req("k", limit, dur, cost))
		if resp.Success {
			continue
		}
		wait := resp.RetryAfter.Milliseconds()
		if wait <= 0 {
			t.Fatalf("denied with retryAfter %v for cost %d <= limit %d", resp.RetryAfter, cost, limit)
		}
		start := clock.ms.Load()
		s, clock = build()
		clock.Set(start + wait - 1)
		if r := mustLimit(t, s, req("k", limit, dur, cost)); r.Success {
			t.Fatalf("case %d: passed %d ms early (retryAfter %d)", i, 1, wait)
		}
		s, clock = build()
		clock.Set(start + wait)
		if r := mustLimit(t, s, req("k", limit, dur, cost)); !r.Success {
			t.Fatalf("case %d: denied after waiting retryAfter %d ms: %+v", i, wait, r)
		}
	}
}

package ratelimit

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// A token bucket is decided as the generic cell rate algorithm (GCRA)
// decides it, in one process exactly: its state is one instant, tat (the
// theoretical arrival time), by which every token taken so far will have
// been refilled. With T = duration/limit the time one token takes to
// refill and τ = burst·T:
//
//	base      = max(tat, now)
//	admitted  = cost <= burst && base + cost·T - now <= τ
//	tat       = base + cost·T      (on admission)
//	remaining = floor((τ - (base - now)) / T)
//	reset     = base               (when the bucket is full again)
//
// What the stores share is what every model shares, the admitted cost of
// each fixed period of the key (the window's cells; a bucket's last its
// burst's refill, see cellMs), so that a bucket's state converges through
// the same grow-only counts: a count the process did not admit itself
// (another process's, raised by a read of the regional store or a replay's
// answer, or another region's, imported by the global tier) is taken from
// the bucket where the tier raises the cell, as if it arrived then (or, for
// an earlier cell's, at that cell's end); a bucket made for a window that
// already holds counts starts with them taken. Seeing a count late makes
// the bucket emptier than it was, never fuller: what it gets wrong the
// other way is what the processes admit between two reads of each other,
// as with every model. What is counted whatever the verdict takes it at
// most one burst past empty (maxDebt).
//
// A key decided by a bucket and by a window of the same cell length
// shares their cells: the bucket takes the window's admissions as the
// stores show them, not as they happen in this process.

// bucket is a token bucket's state beside its window's cells: made for
// the first token bucket decision on a key and held in the window table's
// side map (see windowTable.bucketOf), so that windows of the other
// models stay 80 bytes.
type bucket struct {
	// tat is the theoretical arrival time, unix ns.
	tat atomic.Int64
	// limit per durMs is the refill rate the latest decision gave, and
	// burst its capacity: what counts seen elsewhere are taken at, and
	// what bounds the bucket's debt.
	limit, durMs, burst atomic.Int64
}

// observe records the rate and burst of sp as b's.
func (b *bucket) observe(sp spec) {
	if b.limit.Load() != sp.limit {
		b.limit.Store(sp.limit)
	}
	if b.durMs.Load() != sp.durationMs {
		b.durMs.Store(sp.durationMs)
	}
	if b.burst.Load() != sp.burst {
		b.burst.Store(sp.burst)
	}
}

// maxDebt bounds how far past empty what a bucket counts whatever the
// verdict (reports, Envoy's hits over the limit, and what other processes
// and regions admitted) takes it: one more burst, whose refill it then
// owes. Without a bound a client hammering an empty bucket with counted
// hits would lock itself out for as long as it hammered, and the instant
// would at last overflow; a window forgets everything after two durations.
func maxDebt(tau int64) int64 { return 2 * tau }

// cellMs returns the length of a token bucket's cells for a rate of limit
// per durMs and a burst: the rate's duration, or the time the whole burst
// takes to refill if that is longer (at most MaxWindow). The two cells a
// window keeps then span at least that refill, the bucket's whole memory,
// so that a process that reads them cold (a new process, another region's
// first request) knows every admission the bucket still owes refill for.
func cellMs(limit, durMs, burst int64) int64 {
	if burst <= limit {
		return durMs // the common case, without a division
	}
	full := int64(mulDiv(uint64(burst), uint64(durMs), uint64(limit))) + 1 // rounded up, or a ms over
	return max(durMs, min(full, MaxWindow.Milliseconds()))
}

// full reports whether b holds its whole burst at now (unix ms): every
// token it gave has refilled, so forgetting it loses nothing.
func (b *bucket) full(now int64) bool { return b.tat.Load() <= now*int64(time.Millisecond) }

// take takes n units admitted elsewhere from b, at the rate and burst it
// last observed, as if they arrived at at (unix ns), at most to its debt's
// bound.
func (b *bucket) take(n, at int64) {
	limit, durMs, burst := b.limit.Load(), b.durMs.Load(), b.burst.Load()
	if n <= 0 || limit <= 0 || durMs <= 0 {
		return
	}
	need := refill(n, limit, durMs)
	bound := at + maxDebt(refill(max(burst, 1), limit, durMs))
	for {
		tat := b.tat.Load()
		next := min(max(tat, at)+need, max(bound, tat))
		if next == tat || b.tat.CompareAndSwap(tat, next) {
			return
		}
	}
}

// refill returns, in ns, how long cost tokens of a bucket of limit per dur
// ms take to refill, rounded up (the bucket errs strict by under a ns a
// request).
func refill(cost, limit, durMs int64) int64 {
	hi, lo := bits.Mul64(uint64(cost), uint64(durMs)*uint64(time.Millisecond))
	if hi >= uint64(limit) {
		return math.MaxInt64 / 8
	}
	q, r := bits.Div64(hi, lo, uint64(limit))
	if r != 0 {
		q++
	}
	// Bounded so that an instant, now and a few of these always fit.
	return int64(min(q, math.MaxInt64/8))
}

// tokensIn returns how many whole tokens refill in ns.
func tokensIn(ns, limit, durMs int64) int64 {
	if ns <= 0 {
		return 0
	}
	return int64(mulDiv(uint64(ns), uint64(limit), uint64(durMs)*uint64(time.Millisecond)))
}

// decideBucket decides a request of cost against b, the token bucket sp
// of w, at now (unix ms), counting an admission into cur, w's current
// cell. See decide.
func (s *Service) decideBucket(w *window, b *bucket, now int64, sp spec, cur *cell, cost int64, report, speculative bool) (decision, *cell, bool) {
	b.observe(sp)
	nowNs := now * int64(time.Millisecond)
	tau := refill(sp.burst, sp.limit, sp.durationMs)
	need := refill(cost, sp.limit, sp.durationMs)
	d := decision{algorithm: TokenBucket, limit: sp.limit, capacity: sp.burst}
	// As a window's count (see contention.go): after fastCASAttempts lost
	// races, or on a contended cell, under the key's lock.
	var held *sync.Mutex
	if cur.flags.Load()&cellContended != 0 {
		held = s.contention.lock(cur)
	}
	for attempt := 0; ; attempt++ {
		tat := b.tat.Load()
		base := max(tat, nowNs)
		next := base + need
		if report {
			// Counted whatever the verdict, up to the debt's bound.
			next = min(next, max(nowNs+maxDebt(tau), base))
		}
		fits := cost <= sp.burst && next-nowNs <= tau
		if !fits && !report {
			d.remaining = min(tokensIn(tau-(base-nowNs), sp.limit, sp.durationMs), sp.burst)
			d.resetMs = ceilMs(base)
			if cost <= sp.burst {
				d.retryAfter = ceilMs(next-tau) - now
			}
			unlock(held, cur)
			return d, cur, false
		}
		if cost == 0 {
			d.success = true
			d.remaining = min(tokensIn(tau-(base-nowNs), sp.limit, sp.durationMs), sp.burst)
			d.resetMs = ceilMs(base)
			unlock(held, cur)
			return d, cur, false
		}
		if s.beforeCAS != nil {
			s.beforeCAS(w, cur, attempt)
		}
		if !b.tat.CompareAndSwap(tat, next) {
			held = s.contention.afterLost(held, cur, attempt)
			continue
		}
		unlock(held, cur)
		if speculative {
			w.beginTransition()
			cur.speculative.Add(cost)
			cur.count.Add(cost)
			w.endTransition()
		} else if report {
			addCapped(&cur.count, cost)
		} else {
			cur.count.Add(cost)
		}
		d.success = fits
		d.remaining = max(0, min(tokensIn(tau-(next-nowNs), sp.limit, sp.durationMs), sp.burst))
		d.resetMs = ceilMs(next)
		if !fits {
			// A report past the burst: when a check passes again.
			d.retryAfter = max(ceilMs(next-tau)-now, 0)
		}
		return d, cur, true
	}
}

// ceilMs is unix ns in unix ms, rounded up.
func ceilMs(ns int64) int64 {
	ms := ns / int64(time.Millisecond)
	if ns%int64(time.Millisecond) > 0 {
		ms++
	}
	return ms
}

// takeBack undoes an admission of cost into c, a cell of w, of a request
// decided by sp: its count, and a bucket's tokens.
func (t *windowTable) takeBack(w *window, c *cell, sp spec, cost int64) {
	if sp.algorithm == TokenBucket {
		t.returnTokens(w, c, sp, cost)
	}
	c.count.Add(-cost)
}

// returnTokens gives w's bucket back the cost tokens an admission into c
// took, of a request decided by sp. The count is the caller's to take
// back.
func (t *windowTable) returnTokens(w *window, c *cell, sp spec, cost int64) {
	if b, ok := t.buckets.Load(w); ok {
		b.tat.Add(-refill(cost, sp.limit, sp.durationMs))
	}
}

// raise raises v, a count of c (its own or the other regions'), a cell of
// w, to n at now (unix ms), as a tier does with what it saw counted
// elsewhere: what the raise added is taken from w's bucket, if w has one
// (see the comment at the top of this file). Only a tier raises a count
// so, never a decision's own increment.
func (t *windowTable) raise(w *window, c *cell, v *atomic.Int64, n, now int64) {
	old, raised := raiseTo(v, n)
	if !raised || t.buckets.Size() == 0 {
		return
	}
	if b, ok := t.buckets.Load(w); ok {
		b.take(n-old, arrival(w, c, now))
	}
}

// arrival is when counts of c, a cell of w, first seen at now (unix ms)
// are taken to have arrived, unix ns: now for the current cell, and an
// earlier cell's end, the latest instant they can have arrived, for it.
func arrival(w *window, c *cell, now int64) int64 {
	at := now
	if c.seq() < w.seqOf(now) {
		at = min(now, w.startOf(c.seq()+1))
	}
	return at * int64(time.Millisecond)
}

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
// each fixed window of duration (the window's cells), so that a bucket's
// state converges through the same grow-only counts: a count the process
// did not admit itself (another process's, read from the regional store,
// or another region's, imported by the global tier) is taken from the
// bucket when it is first seen, as if it had arrived then (or, for the
// previous window's, at the current window's start). Seeing it late only
// ever makes the bucket emptier than it was: the error is on the strict
// side, but for what the processes admit between two reads of each other,
// as with every model.

// bucket is a token bucket's state beside its window's cells. 48 bytes,
// made for the first token bucket decision on a key.
type bucket struct {
	// tat is the theoretical arrival time, unix ns.
	tat atomic.Int64
	// absorbed[seq&1] is how much of the count of cell absorbedSeq[seq&1]
	// (this region's and the imported) tat holds: what is above it was
	// admitted elsewhere and is taken from the bucket at the next decision.
	absorbed    [2]atomic.Int64
	absorbedSeq [2]atomic.Int64
	// mu orders the absorption of counts seen late; decisions do not take
	// it.
	mu sync.Mutex
}

// bucketState returns w's bucket, making it on first use.
func (w *window) bucketState() *bucket {
	if b := w.bucket.Load(); b != nil {
		return b
	}
	b := &bucket{}
	b.absorbedSeq[0].Store(math.MinInt64)
	b.absorbedSeq[1].Store(math.MinInt64)
	if w.bucket.CompareAndSwap(nil, b) {
		return b
	}
	return w.bucket.Load()
}

// refill returns, in ns, how long cost tokens of a bucket of limit per dur
// ms take to refill, rounded up (the bucket errs strict by under a ns a
// request).
func refill(cost, limit, durMs int64) int64 {
	hi, lo := bits.Mul64(uint64(cost), uint64(durMs)*uint64(time.Millisecond))
	if hi >= uint64(limit) {
		return math.MaxInt64 / 4
	}
	q, r := bits.Div64(hi, lo, uint64(limit))
	if r != 0 {
		q++
	}
	return int64(min(q, math.MaxInt64/4))
}

// tokensIn returns how many whole tokens refill in ns.
func tokensIn(ns, limit, durMs int64) int64 {
	if ns <= 0 {
		return 0
	}
	return int64(mulDiv(uint64(ns), uint64(limit), uint64(durMs)*uint64(time.Millisecond)))
}

// decideBucket decides a request of cost against the token bucket sp of w
// at now (unix ms), whose current cell (starting at start) is cur and
// previous prev. See decide.
func (w *window) decideBucket(now, start int64, sp spec, cur, prev *cell, cost int64, report, speculative bool) (decision, *cell, bool) {
	b := w.bucketState()
	nowNs := now * int64(time.Millisecond)
	b.absorb(cur, nowNs, sp, w.durationMs)
	if prev != nil {
		b.absorb(prev, start*int64(time.Millisecond), sp, w.durationMs)
	}
	tau := refill(sp.burst, sp.limit, w.durationMs)
	need := refill(cost, sp.limit, w.durationMs)
	d := decision{algorithm: TokenBucket, limit: sp.limit}
	for range maxCASAttempts {
		tat := b.tat.Load()
		base := max(tat, nowNs)
		next := base + need
		fits := cost <= sp.burst && next-nowNs <= tau
		if !fits && !report {
			d.remaining = min(tokensIn(tau-(base-nowNs), sp.limit, w.durationMs), sp.burst)
			d.resetMs = ceilMs(base)
			if cost <= sp.burst {
				d.retryAfter = ceilMs(next-tau) - now
			}
			return d, cur, false
		}
		if cost == 0 {
			d.success = true
			d.remaining = min(tokensIn(tau-(base-nowNs), sp.limit, w.durationMs), sp.burst)
			d.resetMs = ceilMs(base)
			return d, cur, false
		}
		if !b.tat.CompareAndSwap(tat, next) {
			continue
		}
		b.note(cur, cost)
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
		d.remaining = max(0, min(tokensIn(tau-(next-nowNs), sp.limit, w.durationMs), sp.burst))
		d.resetMs = ceilMs(next)
		if !fits {
			// A report past the burst: when a check passes again.
			d.retryAfter = max(ceilMs(next-tau)-now, 0)
		}
		return d, cur, true
	}
	d.remaining = 0
	d.resetMs = now
	return d, cur, false
}

// ceilMs is unix ns in unix ms, rounded up.
func ceilMs(ns int64) int64 {
	ms := ns / int64(time.Millisecond)
	if ns%int64(time.Millisecond) > 0 {
		ms++
	}
	return ms
}

// note records that cost admitted here into c is in tat already.
func (b *bucket) note(c *cell, cost int64) {
	slot, seq := c.seq()&1, c.seq()
	if b.absorbedSeq[slot].Load() == seq {
		b.absorbed[slot].Add(cost)
		return
	}
	b.mu.Lock()
	b.claim(slot, seq)
	b.absorbed[slot].Add(cost)
	b.mu.Unlock()
}

// claim makes slot hold cell seq, with nothing absorbed, if it holds an
// older one. b.mu is held.
func (b *bucket) claim(slot, seq int64) {
	if b.absorbedSeq[slot].Load() < seq {
		b.absorbed[slot].Store(0)
		b.absorbedSeq[slot].Store(seq)
	}
}

// absorb takes from the bucket what c counts beyond what tat holds: what
// other processes and regions admitted, as if it arrived at ns (unix).
func (b *bucket) absorb(c *cell, at int64, sp spec, durMs int64) {
	slot, seq := c.seq()&1, c.seq()
	total := c.count.Load() + c.global.Load()
	if b.absorbedSeq[slot].Load() == seq && total <= b.absorbed[slot].Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.claim(slot, seq)
	if b.absorbedSeq[slot].Load() != seq {
		return // the slot holds a newer cell
	}
	total = c.count.Load() + c.global.Load()
	seen := total - b.absorbed[slot].Load()
	if seen <= 0 {
		return
	}
	b.absorbed[slot].Add(seen)
	need := refill(seen, sp.limit, durMs)
	for {
		tat := b.tat.Load()
		if b.tat.CompareAndSwap(tat, max(tat, at)+need) {
			return
		}
	}
}

// takeBack undoes an admission of cost into c, of a request decided by sp:
// its count, and a bucket's tokens.
func (w *window) takeBack(c *cell, sp spec, cost int64) {
	if sp.algorithm == TokenBucket {
		w.returnTokens(c, sp, cost)
	}
	c.count.Add(-cost)
}

// returnTokens gives a bucket back the cost tokens an admission into c took,
// of a request decided by sp. The count is the caller's to take back.
func (w *window) returnTokens(c *cell, sp spec, cost int64) {
	b := w.bucketState()
	b.tat.Add(-refill(cost, sp.limit, w.durationMs))
	if b.absorbedSeq[c.seq()&1].Load() == c.seq() {
		b.absorbed[c.seq()&1].Add(-cost)
	}
}

package model

import (
	"math"
	"math/bits"
)

// mulDiv returns floor(a*b/c) for c > 0, computed in 128 bits so that counts
// up to 2^63 times durations up to 2^32 ms never overflow. It saturates at
// MaxInt64.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi == 0 {
		return lo / c
	}
	if hi >= c {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, c)
	return min(q, math.MaxInt64)
}

// weighted returns trunc(prev * (1 - elapsed)) for a request elapsed ms into
// a window of d ms: the share of the previous cell that the sliding window
// still overlaps. Integer arithmetic makes it exact; a float64 would be off
// by one for some counts.
func weighted(prev, elapsed, d int64) int64 {
	if prev <= 0 {
		return 0
	}
	return int64(mulDiv(uint64(prev), uint64(d-elapsed), uint64(d)))
}

// minElapsed returns the smallest elapsed time r in [0, d] at which
// weighted(prev, r, d) <= budget, for budget >= 0. At r = d the previous cell
// no longer counts at all, so d is always an answer.
//
//	floor(prev*(d-r)/d) <= budget  ⇔  prev*(d-r) <= (budget+1)*d - 1
//	                               ⇔  r >= d - floor(((budget+1)*d - 1) / prev)
func minElapsed(prev, budget, d int64) int64 {
	if prev <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(budget)+1, uint64(d))
	lo, borrow := bits.Sub64(lo, 1, 0)
	hi -= borrow
	var q uint64
	if hi >= uint64(prev) {
		q = math.MaxUint64
	} else {
		q, _ = bits.Div64(hi, lo, uint64(prev))
	}
	if q >= uint64(d) {
		return 0
	}
	return d - int64(q)
}

// retryAfter returns how many ms after now a request of cost would pass if no
// other traffic arrived, given the totals (regional plus imported) of the
// current and previous cells, and of what is booked into the next one,
// ahead (which cur holds too: see the window model's Count). It returns 0
// when cost exceeds the limit, since no wait can help. now lies elapsed
// ms into its cell of d ms.
func retryAfter(elapsed, d, cur, ahead, prev, limit, cost int64) int64 {
	if cost > limit {
		return 0
	}
	// Later in this window the previous cell's weight falls.
	if budget := limit - cost - cur; budget >= 0 {
		if r := minElapsed(prev, budget, d); r < d {
			return max(r-elapsed, 0)
		}
	}
	// In the next window today's cell is the previous one, beside what is
	// booked into it; two windows on, that is the previous one, and
	// nothing else counts.
	if budget := limit - cost - ahead; budget >= 0 {
		if r := minElapsed(cur-ahead, budget, d); r < d {
			return d - elapsed + r
		}
	}
	return 2*d - elapsed + minElapsed(ahead, limit-cost, d)
}

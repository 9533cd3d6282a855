package ratelimit

// cellTotals is what one writer wrote into the two latest cells of a
// window written as totals (refunds, a concurrency limit's slots), by
// seq&1, and what the store acknowledged of it. Its caller guards it.
type cellTotals struct {
	seq, total, acked [2]int64
}

// add adds n (negative: takes it back) to the total in cell seq, starting
// it from zero if the slot held an older cell, and returns the new total.
func (c *cellTotals) add(seq, n int64) int64 {
	i := seq & 1
	if c.seq[i] != seq {
		c.seq[i], c.total[i], c.acked[i] = seq, 0, 0
	}
	c.total[i] += n
	return c.total[i]
}

// ack records that the store holds total of cell seq.
func (c *cellTotals) ack(seq, total int64) {
	if i := seq & 1; c.seq[i] == seq {
		c.acked[i] = max(c.acked[i], total)
	}
}

// settle records that the store holds the whole total of cell seq.
func (c *cellTotals) settle(seq int64) { c.ack(seq, c.total[seq&1]) }

// unacked returns what of cell seq the store has not acknowledged.
func (c *cellTotals) unacked(seq int64) int64 {
	if i := seq & 1; c.seq[i] == seq {
		return c.total[i] - c.acked[i]
	}
	return 0
}

// ackedAt returns what the store holds of cell seq, as far as the writer
// knows.
func (c *cellTotals) ackedAt(seq int64) int64 {
	if i := seq & 1; c.seq[i] == seq {
		return c.acked[i]
	}
	return 0
}

package cells

// Totals is what one writer wrote into the two latest cells of a
// window written as totals (refunds, a concurrency limit's slots), by
// seq&1, and what the store acknowledged of it. Its caller guards it.
type Totals struct {
	seq, total, acked [2]int64
}

// Add adds n (negative: takes it back) to the total in cell seq, starting
// it from zero if the slot held an older cell, and returns the new total.
func (c *Totals) Add(seq, n int64) int64 {
	i := seq & 1
	if c.seq[i] != seq {
		c.seq[i], c.total[i], c.acked[i] = seq, 0, 0
	}
	c.total[i] += n
	return c.total[i]
}

// Ack records that the store holds total of cell seq.
func (c *Totals) Ack(seq, total int64) {
	if i := seq & 1; c.seq[i] == seq {
		c.acked[i] = max(c.acked[i], total)
	}
}

// Settle records that the store holds the whole total of cell seq.
func (c *Totals) Settle(seq int64) { c.Ack(seq, c.total[seq&1]) }

// Unacked returns what of cell seq the store has not acknowledged.
func (c *Totals) Unacked(seq int64) int64 {
	if i := seq & 1; c.seq[i] == seq {
		return c.total[i] - c.acked[i]
	}
	return 0
}

// AckedAt returns what the store holds of cell seq, as far as the writer
// knows.
func (c *Totals) AckedAt(seq int64) int64 {
	if i := seq & 1; c.seq[i] == seq {
		return c.acked[i]
	}
	return 0
}

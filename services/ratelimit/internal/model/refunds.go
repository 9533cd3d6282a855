package model

import "github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"

// refundsAt returns the refunds of w's cells of seq and seq-1, this region's
// and the others' together, or zeros when no refunds window is held.
func (t *Table) refundsAt(w *cells.Window, seq int64) (cur, prev int64) {
	c, p := t.refundCells(w, seq)
	if c != nil {
		cur = c.Count.Load() + c.Global.Load()
	}
	if p != nil {
		prev = p.Count.Load() + p.Global.Load()
	}
	return cur, prev
}

// HeldIn returns what cell seq of w holds as this process knows it: its
// count, this region's and the others', less what was given back to it
// (see refundsAt), never below zero; 0 for a cell w holds no more.
func (t *Table) HeldIn(w *cells.Window, seq int64) int64 {
	c := w.Cells[seq&1].Load()
	if c == nil || c.Seq() != seq {
		return 0
	}
	r, _ := t.refundCells(w, seq)
	n := c.Count.Load() + c.Global.Load()
	if r != nil {
		n -= r.Count.Load() + r.Global.Load()
	}
	return max(n, 0)
}

// refundCells returns the cells of w's refunds window for seq and seq-1,
// each nil where the table holds none.
func (t *Table) refundCells(w *cells.Window, seq int64) (cur, prev *cells.Cell) {
	k := w.RefundsKey()
	rw := t.Find(&k)
	if rw == nil {
		return nil, nil
	}
	for i := range rw.Cells {
		c := rw.Cells[i].Load()
		if c == nil {
			continue
		}
		switch c.Seq() {
		case seq:
			cur = c
		case seq - 1:
			prev = c
		}
	}
	return cur, prev
}

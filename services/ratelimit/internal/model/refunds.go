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

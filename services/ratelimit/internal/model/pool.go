package model

import (
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/pool"
)

// DecidePool decides an acquisition of cost slots (0: a check of what is
// held) of sp's pool, counted into w's cell, from what this process knows
// at now (unix ms), and counts it if it fits. It returns w's cell and
// whether it counted cost into it; nil, when the janitor removed w
// meanwhile.
func (t *Table) DecidePool(w *cells.Window, now int64, sp Spec, cost int64) (Decision, *cells.Cell, bool) {
	seq, end := pool.CellOf(w)
	cur, _ := w.CellAt(seq, t.Regional == nil)
	g := t.pools.Filed(w, &t.Table)
	if cur == nil || g == nil {
		return Decision{}, nil, false
	}
	g.Lock()
	defer g.Unlock()
	held := g.Held(now, nil)
	d := Decision{Limit: sp.Limit, Capacity: sp.Limit, ResetMs: end}
	if cost > sp.Limit || held > sp.Limit-cost {
		var cells []pool.Held
		g.Held(now, &cells)
		d.Remaining = min(max(sp.Limit-held, 0), sp.Limit)
		d.RetryAfter = pool.FreeAfter(cells, held, cost, sp.Limit, now)
		return d, cur, false
	}
	d.Success = true
	d.Remaining = sp.Limit - held - cost
	if cost == 0 {
		return d, cur, false
	}
	cells.AddCapped(&cur.Count, cost)
	return d, cur, true
}

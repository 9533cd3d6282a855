package ratelimit

import (
	"context"
	"runtime"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Refund gives back part of a reservation (a request with
// [Request.Reserve]) to the window cell it was counted in: what the caller
// reserved and did not spend.
//
// A refund is a count of its own: each key has, beside its window, a
// window of refunds, and its cells are grow-only counters like the key's,
// replayed to the regional store and published to the global store by the
// same rules (own component only, max-merge, imports never published
// again). A decision weighs a cell's count less its refunds, never below
// zero. The caller bounds the amount by what was reserved and refunds a
// reservation once (see package reservation of the API).
type Refund struct {
	Workspace  string
	Namespace  string
	Identifier string
	// Duration and Limit are the reservation's (a lease's, for a slot).
	Duration time.Duration
	Limit    int64
	// Slot makes the refund a release: the reservation is a slot of a
	// concurrency limit, acquired or extended with a lease of Duration
	// (see [Service.Acquire]).
	Slot bool
	// Sequence is the fixed window the reservation was counted in (see
	// [CellOf]), or a slot's cell (see [LeaseCell]).
	Sequence int64
	// Amount is what to give back, 0 to [MaxCost].
	Amount int64
}

// CellOf returns the fixed window a response of a window of duration
// counted in: the one that ends at its Reset.
func CellOf(resp Response, duration time.Duration) int64 {
	ms := duration.Milliseconds()
	if ms <= 0 {
		return 0
	}
	return resp.Reset.UnixMilli()/ms - 1
}

// Refund gives r.Amount back to r's cell and returns what it gave: r.Amount,
// or 0 when the cell no longer counts in any decision (the window after its
// own has ended; a slot's cell, once it ended) or lies in the future. It returns a [*invalid.Error] for
// bad values; the workspace's window cap never refuses a refund.
func (s *Service) Refund(ctx context.Context, r Refund) (int64, error) {
	if err := CheckName("namespace", r.Namespace, MaxNameLength); err != nil {
		return 0, err
	}
	if err := CheckName("identifier", r.Identifier, MaxNameLength); err != nil {
		return 0, err
	}
	if err := CheckDuration("duration", r.Duration, MaxWindow); err != nil {
		return 0, err
	}
	if err := CheckLimit("limit", r.Limit, false); err != nil {
		return 0, err
	}
	if err := CheckCost("amount", r.Amount); err != nil {
		return 0, err
	}
	req := Request{Workspace: r.Workspace, Namespace: r.Namespace, Identifier: r.Identifier,
		Duration: r.Duration}
	key := keyOf(&req)
	nowMs := s.clock.Now().UnixMilli()
	now := nowMs / r.Duration.Milliseconds()
	if r.Slot {
		// A slot's cell, on its lease's grid: it counts until it ends.
		key.period = period.PoolCell(store.PoolShift(r.Duration.Milliseconds()), r.Sequence)
		if key.period.CellEnd() <= nowMs || r.Sequence > key.period.Latest(nowMs) {
			return 0, nil
		}
	} else if r.Sequence < now-1 || r.Sequence > now {
		return 0, nil
	}
	if r.Amount == 0 {
		return 0, nil
	}
	for range maxEvictionRetries {
		// The key's window, if the process holds it or can, learns that
		// its cell has refunds; the refunds window is never refused (see
		// windowTable.reserve), so a refund is never turned away.
		w := s.windows.find(&key)
		if w == nil {
			w, _ = s.windows.forRequest(&key)
		}
		if w != nil {
			if c, _ := w.cellAt(r.Sequence, s.regional == nil); c != nil {
				c.flags.Or(cellReserved)
			}
		}
		rk := key
		rk.refunds = true
		rw, _, err := s.windows.findOrCreate(&rk)
		if err != nil {
			return 0, err
		}
		rw.observeLimit(r.Limit)
		rc, _ := rw.cellAt(r.Sequence, true)
		if rc == nil {
			return 0, nil // the window moved on past the cell meanwhile
		}
		addCapped(&rc.count, r.Amount)
		if rw.evicted() {
			// The janitor is removing the refunds window: take the refund
			// back and count it into the window that replaces it.
			rc.count.Add(-r.Amount)
			runtime.Gosched()
			continue
		}
		switch {
		case s.regional == nil:
		case r.Slot:
			// A release is in the store before it is answered: no
			// process takes a slot a moment late for it. One the store
			// failed is sent again by the replay.
			s.regional.writeThrough(ctx, rw, rc, r.Amount)
		default:
			s.regional.queueReplay(rw, rc, r.Amount)
		}
		s.global.noteRefund(rw, rc)
		s.metrics.refunded.Add(float64(r.Amount))
		return r.Amount, nil
	}
	return 0, nil
}

// refundsAt returns the refunds of w's cells of seq and seq-1, this region's
// and the others' together, or zeros when no refunds window is held.
func (s *Service) refundsAt(w *window, seq int64) (cur, prev int64) {
	c, p := s.windows.refundCells(w, seq)
	if c != nil {
		cur = c.count.Load() + c.global.Load()
	}
	if p != nil {
		prev = p.count.Load() + p.global.Load()
	}
	return cur, prev
}

// refundCells returns the cells of w's refunds window for seq and seq-1,
// each nil where the table holds none.
func (t *windowTable) refundCells(w *window, seq int64) (cur, prev *cell) {
	k := w.refundsKey()
	rw := t.find(&k)
	if rw == nil {
		return nil, nil
	}
	for i := range rw.cells {
		c := rw.cells[i].Load()
		if c == nil {
			continue
		}
		switch c.seq() {
		case seq:
			cur = c
		case seq - 1:
			prev = c
		}
	}
	return cur, prev
}

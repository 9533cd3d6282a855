package ratelimit

import (
	"context"
	"runtime"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// Returned is what a give-back answers: what it gave back, and, asked
// for, the limit after it (x/time/rate's Reservation is the shape: a
// value that holds what its questions need).
type Returned struct {
	// Given is what was given back: the hold's amount, or 0 when its cell
	// no longer counts (a window after its own ended; slots whose cell
	// ended, which freed them) or lies in the future; a refund's part of
	// its cost that the cells held (see Service.Refund).
	Given int64
	s     *Service
	hold  Hold
	// pool is a window of the pool of slots given back that After
	// answers from memory: read with the release, or there is no
	// regional store, or the release is sent with the next replay
	// (ReleaseLater, a refund), counted here. nil otherwise.
	pool *cells.Window
	// req, when set, is the check After answers (a refund's: it knows
	// the limit's model, which a hold does not carry).
	req *Request
}

// After answers the limit after the give-back, as a check of it (cost 0)
// answers: for slots, Limit less Remaining are held, from what the
// regional store answered with the release (one round trip for both,
// where it answered: no call here) or, a release sent with the next
// replay, from memory; for a reservation, what remains of its window, as
// any check reads it, read as a sliding window's (a hold, as a
// reservation's token, does not carry its algorithm); for a refund, a
// check of its request, its own model. A caller that does
// not need it does not pay for it. The zero Returned answers the zero
// Response.
func (r Returned) After(ctx context.Context) (Response, error) {
	switch {
	case r.s == nil:
		return Response{}, nil
	case r.req != nil && r.hold.Kind != Slots:
		return r.s.Decide(ctx, *r.req)
	}
	return r.s.after(ctx, &r.hold, r.pool)
}

// GiveBack gives h.Amount back to h's cell and answers what it gave and,
// asked for, the limit after it (see [Returned]). Slots given back
// are in the regional store before it answers, and what the pool holds is
// read in the same round trip; a store that fails is sent them again by
// the replay, and the pool is then read when After is asked, as a check
// reads it. It returns a
// [*invalid.Error] for bad values; the workspace's window cap never
// refuses a give-back.
func (s *Service) GiveBack(ctx context.Context, h Hold) (Returned, error) {
	given, pool, err := s.giveBack(ctx, h, false)
	if err != nil {
		return Returned{}, err
	}
	return Returned{Given: given, s: s, hold: h, pool: pool}, nil
}

// after answers a check (cost 0) of h's limit: from memory for slots
// whose pool is fresh (pool, one of its windows: see giveBack), else as
// Decide does.
func (s *Service) after(ctx context.Context, h *Hold, pool *cells.Window) (Response, error) {
	req := Request{Workspace: h.Workspace, Namespace: h.Namespace, Identifier: h.Identifier,
		Limit: h.Limit, Duration: h.Duration}
	if h.Kind == Slots {
		req.Algorithm = Concurrency
		if pool != nil {
			if resp, ok := s.checkPoolOf(pool, &req, s.clock.Now().UnixMilli()); ok {
				return resp, nil
			}
		}
	}
	return s.Decide(ctx, req)
}

// giveBack gives h.Amount back to h's cell and returns what it gave, and
// for slots the window of their cell when After may answer from memory
// (see Returned.pool), else nil.
//
// later writes slots given back with the next replay rather than at once
// (see ReleaseLater).
func (s *Service) giveBack(ctx context.Context, h Hold, later bool) (int64, *cells.Window, error) {
	if err := OperatorBounds.CheckHold(&h); err != nil {
		return 0, nil, err
	}
	req := Request{Workspace: h.Workspace, Namespace: h.Namespace, Identifier: h.Identifier,
		Duration: h.Duration}
	key := keyOf(&req)
	nowMs := s.clock.Now().UnixMilli()
	if h.Kind == Slots {
		// A slot's cell, on its lease's grid: it counts until it ends.
		key.Period = period.OfLease(h.Duration.Milliseconds(), h.Sequence)
		if key.Period.CellEnd() <= nowMs || h.Sequence > key.Period.Latest(nowMs) {
			return 0, nil, nil
		}
	} else if now := nowMs / h.Duration.Milliseconds(); h.Sequence < now-1 || h.Sequence > now {
		return 0, nil, nil
	}
	if h.Amount == 0 {
		return 0, nil, nil
	}
	return s.giveTo(ctx, key, h.Sequence, h.Limit, h.Amount, h.Kind == Slots, later)
}

// giveTo gives amount back to cell seq of key's window (of a limit of
// limit): slots are released, anything else refunded (see giveBack);
// later: slots are written with the next replay.
func (s *Service) giveTo(ctx context.Context, key cells.Key, seq, limit, amount int64, slots, later bool) (int64, *cells.Window, error) {
	for range maxEvictionRetries {
		// The key's window, if the process holds it or can, learns that
		// its cell has refunds; the refunds window is never refused (the
		// cell table counts no key's refunds window against its
		// workspace's cap), so a give-back is never turned away.
		w := s.windows.Find(&key)
		if w == nil {
			w, _ = s.windows.ForRequest(&key)
		}
		if w != nil {
			if c, _ := w.CellAt(seq, s.regional == nil); c != nil {
				c.Flags.Or(cells.Reserved)
			}
		}
		rk := key
		rk.Refunds = true
		rw, _, err := s.windows.FindOrCreate(&rk)
		if err != nil {
			return 0, nil, err
		}
		rw.ObserveLimit(limit)
		rc, _ := rw.CellAt(seq, true)
		if rc == nil {
			return 0, nil, nil // the window moved on past the cell meanwhile
		}
		cells.AddCapped(&rc.Count, amount)
		if rw.Evicted() {
			// The janitor is removing the refunds window: take the amount
			// back and count it into the window that replaces it.
			rc.Count.Add(-amount)
			runtime.Gosched()
			continue
		}
		var pool *cells.Window
		switch {
		case s.regional == nil:
			// Memory is all there is: the pool as it stands.
			if slots {
				pool = w
			}
		case slots && !later:
			// A release is in the store before it is answered: no
			// process takes a slot a moment late for it, and the pool
			// is read with it. One the store failed is sent again by
			// the replay.
			if s.regional.Release(ctx, w, rw, rc, amount) {
				pool = w
			}
		default:
			s.regional.QueueReplay(rw, rc, amount)
			if slots {
				// Sent later: what this process knows of the pool,
				// the release counted, answers After from memory.
				pool = w
			}
		}
		s.global.NoteRefund(rw, rc)
		s.metrics.refunded.Add(float64(amount))
		return amount, pool, nil
	}
	return 0, nil, nil
}

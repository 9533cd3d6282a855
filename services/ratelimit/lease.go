package ratelimit

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// ErrLeaseExpired is Extend's answer for slots whose lease ended: they
// are free, and a new [Service.Acquire] takes them again, under the limit
// and overrides of the day.
var ErrLeaseExpired = errors.New("lease expired: its slots are free")

// request returns a as the limiter decides it.
func (a *Acquisition) request() Request {
	return Request{Workspace: a.Workspace, Namespace: a.Namespace, Identifier: a.Identifier,
		Limit: a.Limit, Duration: a.Lease, Algorithm: Concurrency, Cost: a.Cost, Reserve: true}
}

// Acquire takes a.Cost slots if at most a.Limit less a.Cost are held,
// and answers as [Service.Decide] does: Remaining is the slots left free
// (so Limit less Remaining are held, at most Limit), Reset when the slots
// free themselves if they are not released (the lease's end, less than a
// second or a tenth of the lease later), RetryAfter when enough held ones
// expire if no release comes first. The slot is [Slot] with
// [LeaseCell](resp, a.Lease). It validates a.
func (s *Service) Acquire(ctx context.Context, a Acquisition) (Response, error) {
	if err := a.Validate(); err != nil {
		return Response{}, err
	}
	return s.Decide(ctx, a.request())
}

// InFlight returns how many of the slots of the limit of acquisition a
// are held now, without taking any: as the region holds them, read in the
// regional store first, or as far as this process knows when that read
// fails (or there is no regional store).
func (s *Service) InFlight(ctx context.Context, a Acquisition) (int64, error) {
	r := a.request()
	r.Cost, r.Reserve = 0, false
	resp, err := s.Decide(ctx, r)
	return r.Limit - resp.Remaining, err
}

// Release frees sl: [Service.GiveBack] of [Slot.Hold]. Given is sl.Cost,
// or 0 when the slot had expired already; After answers the slots held
// after it (its Limit less its Remaining), read with the release. The
// caller frees a slot once (package reservation's ledger of the API); a
// second release would free another holder's slot.
func (s *Service) Release(ctx context.Context, sl Slot) (Returned, error) {
	return s.GiveBack(ctx, sl.Hold())
}

// ReleaseLater frees sl as Release does, but its release reaches the
// regional store with the next replay, in one write with the process's
// others, rather than in a round trip of its own: for slots held a moment
// and given back that no one waits for (an acquisition whose request
// another limit refused), so that a request of many such limits costs one
// write, not one a limit. Until that replay (regional.ReplayInterval;
// when the replay queue is full, the cell's next write, and at the latest
// the end of the slots' cell) other processes still count the slots held,
// which errs strict. After answers from what this process knows of the
// pool, the release counted: no read.
func (s *Service) ReleaseLater(ctx context.Context, sl Slot) (Returned, error) {
	h := sl.Hold()
	given, pool, err := s.giveBack(ctx, h, true)
	if err != nil {
		return Returned{}, err
	}
	return Returned{Given: given, s: s, hold: h, pool: pool}, nil
}

// Extend keeps sl for lease from now (sl.Lease if lease is 0), whatever
// else is held (the holder had the slots already): it counts them in the
// cell of their new expiry and frees them from their old one. Slots whose
// lease ended are free: [ErrLeaseExpired], and a new [Service.Acquire]
// takes them again. The answer is Acquire's, Success set: the slot held
// now is sl with Lease lease and Sequence [LeaseCell](resp, lease). Like
// Release, each slot is extended once.
func (s *Service) Extend(ctx context.Context, sl Slot, lease time.Duration) (Response, error) {
	if lease == 0 {
		lease = sl.Lease
	}
	a := Acquisition{Workspace: sl.Workspace, Namespace: sl.Namespace, Identifier: sl.Identifier,
		Limit: sl.Limit, Lease: lease, Cost: sl.Cost}
	if err := a.Validate(); err != nil {
		return Response{}, err
	}
	if err := CheckLease("lease", sl.Lease); err != nil {
		return Response{}, err
	}
	now := s.clock.Now().UnixMilli()
	if !sl.ExpiresAt().After(time.UnixMilli(now)) {
		return Response{}, ErrLeaseExpired
	}
	r := a.request()
	to := poolKey(&r, now)
	if from := period.OfLease(sl.Lease.Milliseconds(), sl.Sequence); from == to.Period {
		// Counted in the cell of the new expiry already.
		return s.state(ctx, a, to, nil)
	}
	// Count the slots into the new cell first, whatever the limit says
	// (in the regional store at once, as a take is), then free the old
	// ones: in between they are counted twice, never not at all. If the
	// store did not take the new count, the region does not see it until
	// the replay sends it: the old ones stay counted until they expire,
	// never the slot nowhere.
	sent, err := s.count(ctx, a, to)
	if err != nil {
		return Response{}, err
	}
	if !sent {
		return s.state(ctx, a, to, nil)
	}
	freed, pool, err := s.giveBack(ctx, sl.Hold(), false)
	if err != nil || freed == 0 {
		// The old cell ended meanwhile: the slots were free. Undo the
		// count.
		moved := sl
		moved.Lease = lease
		moved.Sequence = to.Period.Cell()
		if _, _, uerr := s.giveBack(ctx, moved.Hold(), false); uerr != nil {
			return Response{}, uerr
		}
		if err != nil {
			return Response{}, err
		}
		return Response{}, ErrLeaseExpired
	}
	return s.state(ctx, a, to, pool)
}

// count counts a.Cost slots into the pool cell of key, whatever the limit
// says, and reports whether the region sees them: with a regional store
// it sends them at once, as a take is sent, and reports false if the
// store failed (the replay sends this process's total of the cell again,
// which holds them).
func (s *Service) count(ctx context.Context, a Acquisition, key cells.Key) (bool, error) {
	seq := key.Period.Cell()
	for range maxEvictionRetries {
		w, err := s.windows.ForRequest(&key)
		if err != nil {
			return false, err
		}
		w.ObserveLimit(a.Limit)
		c, _ := w.CellAt(seq, s.regional == nil)
		if c == nil {
			return false, errors.New("concurrency limit: the cell of the new expiry ended")
		}
		if s.regional != nil {
			// In the store, or, if it failed, in this process's total of
			// the cell, which the replay sends again as it is (see
			// regional.Tier.WriteThrough): counted in memory only. A window the janitor
			// removes meanwhile is replaced by one that reads it back.
			sent := s.regional.WriteThrough(ctx, w, c, a.Cost)
			if !sent {
				cells.AddCapped(&c.Count, a.Cost)
			}
			s.global.NoteGrowth(w, c, a.Limit)
			return sent, nil
		}
		cells.AddCapped(&c.Count, a.Cost)
		if w.Evicted() {
			c.Count.Add(-a.Cost)
			runtime.Gosched()
			continue
		}
		s.global.NoteGrowth(w, c, a.Limit)
		return true, nil
	}
	return false, errors.New("concurrency limit: its window kept being evicted")
}

// state answers an extension of a whose slots are held in the pool cell
// of key: held, Reset the cell's end (so that [LeaseCell] names it), and
// the rest what a check of one more would answer: from memory through
// pool, a window of the pool, when the pool was read with the release of
// the old slots (see giveBack), else as Decide does.
func (s *Service) state(ctx context.Context, a Acquisition, key cells.Key, pool *cells.Window) (Response, error) {
	r := a.request()
	r.Cost, r.Reserve = 0, false
	resp, ok := Response{}, false
	if pool != nil {
		resp, ok = s.checkPoolOf(pool, &r, s.clock.Now().UnixMilli())
	}
	var err error
	if !ok {
		resp, err = s.Decide(ctx, r)
	}
	resp.Success, resp.RetryAfter = true, 0
	resp.Reset = time.UnixMilli(key.Period.CellEnd())
	return resp, err
}

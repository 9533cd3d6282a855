package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/unkeyed/ratelimit/internal/invalid"
)

// Lease bounds: a slot frees itself between one and two leases after it
// was acquired (see [Concurrency]), so a lease is a whole number of seconds
// from a second, under which the clocks of a fleet disagree, to an hour,
// past which a slot a crashed caller held would stay taken too long; a
// longer call extends its lease.
const (
	MinLease = time.Second
	MaxLease = time.Hour
)

// Acquisition asks for Cost slots of a concurrency limit: at most Limit
// slots of Namespace and Identifier held at once, each freed by its
// release or, at the latest, when its lease runs out. The lease is part of
// the limit's name, as a window's duration is: acquisitions with other
// leases count apart.
type Acquisition struct {
	Workspace  string
	Namespace  string
	Identifier string
	// Limit is how many slots may be held at once, 1 to [MaxLimit] (0,
	// where the caller allows it, refuses every acquisition).
	Limit int64
	// Lease is how long a slot is held at least if it is not released:
	// whole seconds, [MinLease] to [MaxLease].
	Lease time.Duration
	// Cost is how many slots, 1 to [MaxCost].
	Cost int64
}

// Slot is a held slot as its holder names it to release or extend it: the
// limit's name and numbers, and the cell it was counted in.
type Slot struct {
	Workspace  string
	Namespace  string
	Identifier string
	Limit      int64
	Lease      time.Duration
	// Sequence is the lease-long cell the slot was counted in (see
	// [CellOf] with Lease).
	Sequence int64
	// Cost is how many slots it holds.
	Cost int64
}

// Validate checks a by the limiter's rules, naming the field that breaks
// one. It accepts a limit of 0, which refuses every acquisition: a caller
// that takes limits from callers refuses theirs with [CheckLimit].
func (a *Acquisition) Validate() error {
	if err := CheckName("namespace", a.Namespace, MaxNameLength); err != nil {
		return err
	}
	if err := CheckName("identifier", a.Identifier, MaxNameLength); err != nil {
		return err
	}
	if err := CheckLimit("limit", a.Limit, true); err != nil {
		return err
	}
	if err := CheckLease("lease", a.Lease); err != nil {
		return err
	}
	if a.Cost < 1 {
		return &invalid.Error{Field: "cost", Rule: fmt.Sprintf("must be between 1 and %d: the slots to acquire", int64(MaxCost))}
	}
	return CheckCost("cost", a.Cost)
}

// CheckLease checks a lease: whole seconds from MinLease to MaxLease.
func CheckLease(field string, lease time.Duration) error {
	if lease < MinLease || lease > MaxLease || lease%time.Second != 0 {
		return &invalid.Error{Field: field, Rule: fmt.Sprintf("must be whole seconds between %d and %d: how long a slot is held if it is not released",
			int64(MinLease/time.Second), int64(MaxLease/time.Second))}
	}
	return nil
}

// request returns a as the limiter decides it.
func (a *Acquisition) request() Request {
	return Request{Workspace: a.Workspace, Namespace: a.Namespace, Identifier: a.Identifier,
		Limit: a.Limit, Duration: a.Lease, Algorithm: Concurrency, Cost: a.Cost, Reserve: true}
}

// Acquire takes a.Cost slots if at most a.Limit less a.Cost are held,
// and answers as [Service.Decide] does: Remaining is the slots left free
// (so Limit less Remaining are held, at most Limit), Reset the end of the
// lease-long cell the slots were counted in, which they outlive by one
// lease at most, RetryAfter when the oldest held slots expire if no
// release comes first. The slot is [Slot] with [CellOf](resp, a.Lease).
// It validates a.
func (s *Service) Acquire(ctx context.Context, a Acquisition) (Response, error) {
	if err := a.Validate(); err != nil {
		return Response{}, err
	}
	return s.Decide(ctx, a.request())
}

// InFlight returns how many of the slots of a limit of acquisition a are
// held now, as far as this process knows, without taking any.
func (s *Service) InFlight(ctx context.Context, a Acquisition) (int64, error) {
	r := a.request()
	r.Cost, r.Reserve = 0, false
	resp, err := s.Decide(ctx, r)
	return r.Limit - resp.Remaining, err
}

// Release frees sl and returns how many slots it freed: sl.Cost, or 0 when
// the slot had expired already. The caller frees a slot once (package
// reservation's ledger of the API); a second release would free another
// holder's slot.
func (s *Service) Release(ctx context.Context, sl Slot) (int64, error) {
	return s.Refund(ctx, sl.refund(sl.Sequence))
}

// refund returns the refund that frees sl's slots counted in cell seq.
func (sl *Slot) refund(seq int64) Refund {
	return Refund{Workspace: sl.Workspace, Namespace: sl.Namespace, Identifier: sl.Identifier,
		Duration: sl.Lease, Limit: sl.Limit, Sequence: seq, Amount: sl.Cost, Slot: true}
}

// Extend keeps sl for another lease at least: it counts the slots in the
// current cell and frees them from their old one, whatever else is held
// (the holder had them already); slots counted in the current cell stay
// where they are. A slot that had expired is acquired anew, as
// Acquire would, and may be refused. The answer is Acquire's: the slot
// held now is sl with [CellOf](resp, sl.Lease), when resp.Success. Like
// Release, each slot is extended once.
func (s *Service) Extend(ctx context.Context, sl Slot) (Response, error) {
	a := Acquisition{Workspace: sl.Workspace, Namespace: sl.Namespace, Identifier: sl.Identifier,
		Limit: sl.Limit, Lease: sl.Lease, Cost: sl.Cost}
	if err := a.Validate(); err != nil {
		return Response{}, err
	}
	now := s.clock.Now().UnixMilli() / sl.Lease.Milliseconds()
	switch sl.Sequence {
	case now:
		// Counted in the current cell: held for a lease more already.
		return s.state(ctx, a, sl.Sequence)
	case now - 1:
	default:
		return s.Decide(ctx, a.request())
	}
	// Count the slots into the current cell first, whatever the limit
	// says (in the regional store at once, as a take is), then free the
	// old ones: in between they are counted twice, never not at all.
	moved, err := s.count(ctx, a, now)
	if err != nil {
		return Response{}, err
	}
	freed, err := s.Refund(ctx, sl.refund(sl.Sequence))
	if err != nil || freed == 0 {
		// The old cell expired meanwhile: the slots were free. Undo the
		// count and acquire them as anyone would.
		if _, uerr := s.Refund(ctx, sl.refund(moved)); uerr != nil {
			return Response{}, uerr
		}
		if err != nil {
			return Response{}, err
		}
		return s.Decide(ctx, a.request())
	}
	return s.state(ctx, a, moved)
}

// count counts a.Cost slots into a's cell seq (or the window's newer one,
// for a clock reading another request passed), whatever the limit says,
// and returns the cell it counted them in. With a regional store it sends
// them at once, as a take is sent: another process must not see them
// nowhere while the old cell's are freed; if the store fails, the replay
// sends this process's total of the cell again, which holds them.
func (s *Service) count(ctx context.Context, a Acquisition, seq int64) (int64, error) {
	r := a.request()
	key := keyOf(&r)
	for range maxEvictionRetries {
		w, err := s.windows.forRequest(&key)
		if err != nil {
			return 0, err
		}
		w.observeLimit(a.Limit)
		c, newer := w.cellAt(seq, s.regional == nil)
		if c == nil {
			seq = newer
			continue
		}
		if s.regional != nil {
			// In the store, or, if it failed, in this process's total of
			// the cell, which the replay sends again as it is (see
			// writeThrough): counted in memory only. A window the janitor
			// removes meanwhile is replaced by one that reads it back.
			if !s.regional.writeThrough(ctx, w, c, a.Cost) {
				addCapped(&c.count, a.Cost)
			}
			s.global.noteGrowth(w, c, a.Limit)
			return seq, nil
		}
		addCapped(&c.count, a.Cost)
		if w.evicted() {
			c.count.Add(-a.Cost)
			runtime.Gosched()
			continue
		}
		s.global.noteGrowth(w, c, a.Limit)
		return seq, nil
	}
	return 0, errors.New("concurrency limit: its window kept being evicted")
}

// state answers an extension of a whose slots are held in cell seq: held,
// Reset the end of seq (so that [CellOf] names it, whatever the clock
// reads now), and the rest what a check of one more would answer.
func (s *Service) state(ctx context.Context, a Acquisition, seq int64) (Response, error) {
	r := a.request()
	r.Cost, r.Reserve = 0, false
	resp, err := s.Decide(ctx, r)
	resp.Success, resp.RetryAfter = true, 0
	resp.Reset = time.UnixMilli((seq + 1) * a.Lease.Milliseconds())
	return resp, err
}

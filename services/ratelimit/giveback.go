package ratelimit

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// Hold is what an admitted reservation or acquisition holds, as its
// holder names it to give it back (x/time/rate's Reservation is the
// shape): the limit, the cell its amount was counted in, and how much.
// A reservation holds the estimate of a request with [Request.Reserve]
// in a window's cell; an acquisition holds slots of a concurrency limit
// in the pool cell of their expiry (see [Slot.Hold]).
//
// What is given back is a count of its own: each key has, beside its
// window, a window of what was given back, whose cells are grow-only
// counters like the key's, replayed to the regional store and published
// to the global store by the same rules (own component only, max-merge,
// imports never published again). A decision weighs a cell's count less
// what was given back, never below zero. The caller bounds the amount by
// what was held and gives a hold back once (see package reservation of
// the API): a second give-back of slots would free another holder's.
type Hold struct {
	// Kind is what is held: a reservation's estimate or slots.
	Kind       HoldKind
	Workspace  string
	Namespace  string
	Identifier string
	// Duration is a reservation's window, or the lease slots were
	// acquired or last extended with (it names the grid of their cell).
	Duration time.Duration
	// Limit is the limit's, as the holder was admitted under it.
	Limit int64
	// Sequence is the cell the amount was counted in: a reservation's
	// fixed window (see [CellOf]), slots' pool cell (see [LeaseCell]).
	Sequence int64
	// Amount is what to give back, 0 to [MaxCost].
	Amount int64
}

// HoldKind is what a [Hold] holds.
type HoldKind uint8

// The kinds of hold.
const (
	// Reserved is a reservation's estimate: giving it back refunds what
	// the caller reserved and did not spend.
	Reserved HoldKind = iota
	// Slots are slots of a concurrency limit: giving them back releases
	// them.
	Slots
)

// Returned is what a give-back answers: what it gave back, and, asked
// for, the limit after it (x/time/rate's Reservation is the shape: a
// value that holds what its questions need).
type Returned struct {
	// Given is what was given back: the hold's amount, or 0 when its cell
	// no longer counts (a window after its own ended; slots whose cell
	// ended, which freed them) or lies in the future.
	Given int64
	s     *Service
	hold  Hold
	// pool is a window of the pool of slots given back whose count this
	// process knows fresh (read with the release, or there is no
	// regional store): After answers from memory. nil otherwise.
	pool *cells.Window
}

// After answers the limit after the give-back, as a check of it (cost 0)
// answers: for slots, Limit less Remaining are held, from what the
// regional store answered with the release (one round trip for both,
// where it answered: no call here); for a reservation, what remains of its
// window, as any check reads it, read as a sliding window's (a hold, as a
// reservation's token, does not carry its algorithm). A caller that does
// not need it does not pay for it. The zero Returned answers the zero
// Response.
func (r Returned) After(ctx context.Context) (Response, error) {
	if r.s == nil {
		return Response{}, nil
	}
	return r.s.after(ctx, &r.hold, r.pool)
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

// GiveBack gives h.Amount back to h's cell and answers what it gave and,
// asked for, the limit after it (see [Returned]). Slots given back
// are in the regional store before it answers, and what the pool holds is
// read in the same round trip; a store that fails is sent them again by
// the replay, and the pool is then read when After is asked, as a check
// reads it. It returns a
// [*invalid.Error] for bad values; the workspace's window cap never
// refuses a give-back.
func (s *Service) GiveBack(ctx context.Context, h Hold) (Returned, error) {
	given, pool, err := s.giveBack(ctx, h)
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
// for slots the window of their cell if what this process knows of their
// pool is fresh (read in the regional store with the release, or there is
// none), else nil.
func (s *Service) giveBack(ctx context.Context, h Hold) (int64, *cells.Window, error) {
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
			if c, _ := w.CellAt(h.Sequence, s.regional == nil); c != nil {
				c.Flags.Or(cells.Reserved)
			}
		}
		rk := key
		rk.Refunds = true
		rw, _, err := s.windows.FindOrCreate(&rk)
		if err != nil {
			return 0, nil, err
		}
		rw.ObserveLimit(h.Limit)
		rc, _ := rw.CellAt(h.Sequence, true)
		if rc == nil {
			return 0, nil, nil // the window moved on past the cell meanwhile
		}
		addCapped(&rc.Count, h.Amount)
		if rw.Evicted() {
			// The janitor is removing the refunds window: take the amount
			// back and count it into the window that replaces it.
			rc.Count.Add(-h.Amount)
			runtime.Gosched()
			continue
		}
		var pool *cells.Window
		switch {
		case s.regional == nil:
			// Memory is all there is: the pool as it stands.
			if h.Kind == Slots {
				pool = w
			}
		case h.Kind == Slots:
			// A release is in the store before it is answered: no
			// process takes a slot a moment late for it, and the pool
			// is read with it. One the store failed is sent again by
			// the replay.
			if s.regional.release(ctx, w, rw, rc, h.Amount) {
				pool = w
			}
		default:
			s.regional.queueReplay(rw, rc, h.Amount)
		}
		s.global.NoteRefund(rw, rc)
		s.metrics.refunded.Add(float64(h.Amount))
		return h.Amount, pool, nil
	}
	return 0, nil, nil
}

// refundsAt returns the refunds of w's cells of seq and seq-1, this region's
// and the others' together, or zeros when no refunds window is held.
func (s *Service) refundsAt(w *cells.Window, seq int64) (cur, prev int64) {
	c, p := s.windows.refundCells(w, seq)
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
func (t *windowTable) refundCells(w *cells.Window, seq int64) (cur, prev *cells.Cell) {
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

// givenBack is what this process wrote into the two cells of one window
// whose cells are written as totals (refunds; a concurrency limit's
// slots) so far, by sequence, and what the store acknowledged of it.
type givenBack struct {
	// name is the writer's name within the process: one per window
	// object, so that a window the janitor removed and another request
	// made again writes as another writer, whose total starts from zero
	// beside the old one's rather than under it.
	name string
	mu   sync.Mutex
	cells.Totals
}

// giveBack adds amount (0 or more) to what this process wrote into w's
// cell seq, and returns the writer's name and the new total: what a write
// of the cell to the regional store carries (see store.Increment.Writer).
func (t *windowTable) giveBack(w *cells.Window, seq, amount int64) (string, int64) {
	g := t.givenOf(w)
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.name, g.Add(seq, amount)
}

// givenOf returns w's totals, made on first use with a name of their own.
func (t *windowTable) givenOf(w *cells.Window) *givenBack {
	g, _ := t.given.LoadOrCompute(w, func() (*givenBack, bool) {
		return &givenBack{name: "g" + strconv.FormatUint(t.writers.Add(1), 10)}, false
	})
	return g
}

// acked records that the store holds total of w's cell seq.
func (t *windowTable) acked(w *cells.Window, seq, total int64) {
	g, ok := t.given.Load(w)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.Ack(seq, total)
}

// unacked returns what this process wrote into w's cell seq that the
// store has not acknowledged: a write that failed and waits for the
// replay, which the store may not hold.
func (t *windowTable) unacked(w *cells.Window, seq int64) int64 {
	g, ok := t.given.Load(w)
	if !ok {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.Totals.Unacked(seq)
}

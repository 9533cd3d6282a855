package ratelimit

import (
	"context"
	"errors"
	"hash/maphash"
	"runtime"
	"slices"
	"sync"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/pool"
)

// Refund gives req.Cost back to req's limit now: what a caller counted and
// takes back without a token of what it counted (Envoy's negative hits: a
// request that turned out cheaper, a stream that ended), so the cell the
// cost was counted in is not known. What it gives back, and where:
//
//   - A window (sliding, fixed, a calendar's period): the cell of now, no
//     more than it holds; a sliding window's remainder to the cell before,
//     which it still weighs. A fixed window's earlier cells count no more,
//     and get nothing.
//   - A concurrency limit: up to Cost slots are released, from the cells
//     of the pool that end first, each no more than it holds: in place of
//     a slot that is still held, one that would have freed itself no
//     later, so what stays held stays held at least as long. They reach
//     the regional store with the next replay, as [Service.ReleaseLater]'s
//     do.
//   - A token bucket: up to Cost tokens back, never past full (a part
//     of a token owed counts as one), counted beside the bucket's cells
//     as the tokens given back to it, which the other processes and
//     regions give back to theirs as they see them (each never past
//     full).
//
// What a cell holds is what this process knows of it, read from the
// regional store first (req is checked first, cost 0, and a window's cells
// are read again with their refunds): its count, the region's and the
// other regions', less what was given back already; this process's
// refunds of a key are serialized, so that two cannot both give back the
// same count. So a refund never takes a cell below zero as far as this
// process knows. What it does not know errs both ways: hits not yet read
// make it give back less; refunds another process or region has given and
// not yet written (a replay interval, or a flush of the global tier) make
// it give back up to those too. Given back, it reaches the other
// processes and regions as every give-back does: written as this
// process's total, so that a write replayed after a timeout is counted
// once. The caller's own retries are not told apart from new refunds. It
// returns a [*invalid.Error] for bad values, as [Service.Limit] does.
func (s *Service) Refund(ctx context.Context, req Request) (Returned, error) {
	var err error
	if req.Algorithm == Concurrency {
		// Checked as the acquisition it gives back to: its lease in
		// Duration.
		a := Acquisition{Workspace: req.Workspace, Namespace: req.Namespace, Identifier: req.Identifier,
			Limit: req.Limit, Lease: req.Duration, Cost: req.Cost}
		err = a.Validate()
	} else {
		err = OperatorBounds.CheckRequest(&req)
	}
	if err != nil {
		return Returned{}, err
	}
	if req.Cost == 0 || req.Limit == 0 {
		return Returned{}, nil
	}
	check := req
	check.Cost = 0
	if _, err := s.Decide(ctx, check); err != nil {
		var full *CapacityError
		if errors.As(err, &full) {
			// The workspace holds no window for the key: nothing
			// counted here to give back.
			return Returned{}, nil
		}
		return Returned{}, err
	}
	now := s.clock.Now().UnixMilli()
	var given int64
	var fresh *cells.Window
	switch req.Model() {
	case Concurrency:
		mu := s.refundLock(&req)
		mu.Lock()
		given, fresh, err = s.refundSlots(ctx, &req, now)
		mu.Unlock()
	case TokenBucket:
		// Table.GiveTokens takes the bucket's own lock.
		given = s.refundTokens(&req, now)
	default:
		given, err = s.refundWindow(ctx, &req, now)
	}
	if err != nil {
		return Returned{}, err
	}
	h := Hold{Workspace: req.Workspace, Namespace: req.Namespace, Identifier: req.Identifier, Duration: req.Duration,
		Limit: req.Limit, Amount: given}
	if req.Model() == Concurrency {
		h.Kind = Slots
	}
	return Returned{Given: given, s: s, hold: h, pool: fresh, req: &check}, nil
}

// refundWindow gives req.Cost back to the cell of now of req's window (a
// sliding window's remainder to the cell before), each no more than it
// holds, and returns what it gave.
func (s *Service) refundWindow(ctx context.Context, req *Request, now int64) (int64, error) {
	key := keyOf(req)
	w := s.windows.Find(&key)
	if w == nil {
		return 0, nil // nothing counted here, as far as this process knows
	}
	seq, _, _ := w.SeqAt(now)
	seqs := []int64{seq}
	if req.Model() == SlidingWindow {
		seqs = append(seqs, seq-1)
	}
	// What the region holds, and has given back, read now: a refund
	// caps at it. The cells are marked as given back to, so that the
	// read takes in their refunds (other processes' too) and every
	// decision on them does from now on.
	for _, sq := range seqs {
		if c, _ := w.CellAt(sq, s.regional == nil); c != nil {
			c.Flags.Or(cells.Reserved)
		}
	}
	s.regional.ReadNow(ctx, w, now)
	// One refund of a key at a time in this process, its cap read and
	// its give-back one step (no I/O under the lock: the give-back is
	// replayed).
	mu := s.refundLock(req)
	mu.Lock()
	defer mu.Unlock()
	left, given := req.Cost, int64(0)
	for _, sq := range seqs {
		n := min(left, s.windows.HeldIn(w, sq))
		if n <= 0 {
			continue
		}
		g, _, err := s.giveTo(ctx, key, sq, req.Limit, n, false, false)
		if err != nil {
			return given, err
		}
		given += g
		if left -= g; left == 0 {
			break
		}
	}
	return given, nil
}

// refundTokens gives up to req.Cost tokens back to req's token bucket at
// now (unix ms), never past full, counted into the cell of now of the
// tokens given back to it, and returns how many (see Table.GiveTokens).
// They reach the regional store with the next replay, as each process's
// total, and the other regions as refunds do.
func (s *Service) refundTokens(req *Request, now int64) int64 {
	key := keyOf(req)
	w := s.windows.Find(&key)
	if w == nil {
		return 0 // nothing taken here, as far as this process knows
	}
	gk := w.GivenKey()
	var given int64
	for range maxEvictionRetries {
		// The given tokens' window is a refunds window: the cell table
		// never refuses it.
		gw, _, err := s.windows.FindOrCreate(&gk)
		if err != nil {
			return given
		}
		gw.ObserveLimit(req.Limit)
		gc, _ := gw.CellAt(w.SeqOf(now), true)
		if gc == nil {
			return given // the window moved on past the cell meanwhile
		}
		if given == 0 {
			if given = s.windows.GiveTokens(w, gw, gc, req.Cost, now); given == 0 {
				return 0
			}
		} else {
			// Given back already, and counted into a window the janitor
			// removed: counted into the one that replaces it, whose
			// cell may hold other processes' give-backs a read brought
			// meanwhile, which the bucket takes back now.
			cells.AddCapped(&gc.Count, given)
			s.windows.SettleGiven(gw, gc, now)
		}
		if gw.Evicted() {
			// The janitor is removing it (or looked, and keeps it): the
			// count is taken out again and put where it will be written.
			gc.Count.Add(-given)
			runtime.Gosched()
			continue
		}
		if s.regional != nil {
			s.regional.QueueReplay(gw, gc, given)
		}
		s.global.NoteRefund(gw, gc)
		s.metrics.refunded.Add(float64(given))
		return given
	}
	return given
}

// refundSlots releases up to req.Cost slots of the pool of req's
// concurrency limit, from the cells that end first, each no more than it
// holds, written with the next replay (as ReleaseLater does: no round
// trip under the caller's lock), and returns how many, and a window of
// the pool that answers from memory (see giveBack).
func (s *Service) refundSlots(ctx context.Context, req *Request, now int64) (int64, *cells.Window, error) {
	key := poolKey(req, now)
	w := s.windows.Find(&key)
	if w == nil {
		return 0, nil, nil
	}
	g := s.windows.Pools().Of(w)
	if g == nil {
		return 0, nil, nil
	}
	type held struct {
		w        *cells.Window
		seq, end int64
		n        int64
	}
	var cs []held
	for _, pc := range g.Live(now) {
		seq, end := pool.CellOf(pc.W)
		if n := s.windows.HeldIn(pc.W, seq); n > 0 {
			cs = append(cs, held{pc.W, seq, end, n})
		}
	}
	slices.SortFunc(cs, func(a, b held) int { return int(min(max(a.end-b.end, -1), 1)) })
	left, given := req.Cost, int64(0)
	var fresh *cells.Window
	for _, c := range cs {
		n, f, err := s.giveTo(ctx, c.w.Key(), c.seq, req.Limit, min(left, c.n), true, true)
		if err != nil {
			return given, fresh, err
		}
		given, fresh = given+n, f
		if left -= n; left == 0 {
			break
		}
	}
	return given, fresh, nil
}

// refundSeed seeds the hash that picks a key's refund lock.
var refundSeed = maphash.MakeSeed()

// refundLock returns the lock of req's key's refunds (its workspace,
// namespace and identifier: a pool's leases of any length share it).
func (s *Service) refundLock(req *Request) *sync.Mutex {
	var h maphash.Hash
	h.SetSeed(refundSeed)
	h.WriteString(req.Workspace)
	h.WriteByte(0)
	h.WriteString(req.Namespace)
	h.WriteByte(0)
	h.WriteString(req.Identifier)
	return &s.refunds[h.Sum64()%uint64(len(s.refunds))]
}

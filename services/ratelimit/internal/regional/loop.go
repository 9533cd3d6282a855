package regional

import (
	"context"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/pool"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Run replays accepted increments and refreshes stale windows every
// ReplayInterval until ctx is done, then replays once more so that what was
// accepted before shutdown reaches the regional store.
func (r *Tier) Run(ctx context.Context) {
	t := time.NewTicker(ReplayInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.Replay(context.Background())
			return
		case <-t.C:
			r.Replay(ctx)
			r.RefreshStale(ctx)
		}
	}
}

// Replay sends every queued cell's unreplayed increments to the regional
// store in one round trip, each with its floor (the highest count the store
// showed this process, plus the increment), and raises each cell to the
// count it answers. A store that lost its data is so re-seeded by every process that
// still holds the counts, on its next increment of a cell or its next read
// of one (see merge), by max-merge: processes that re-seed at once do not
// add up. An increment the store did not take goes back into its cell and
// is sent again next time, for as long as its window can still affect a
// decision. A cell whose count the store took at once (cells.ToMark) is sent
// without an increment if it is to be marked, and again if that fails.
func (r *Tier) Replay(ctx context.Context) {
	r.resendTakes(ctx, r.clock.Now().UnixMilli())
	items := r.replays.Take()
	if len(items) == 0 {
		return
	}
	now := r.clock.Now().UnixMilli()
	incs := make([]store.Increment, 0, len(items))
	var marksOnly []bool // by inc: sent only to mark the cell (cells.ToMark)
	var reseeded []cells.Ref
	sent := items[:0]
	for _, it := range items {
		flags := it.C.Flags.And(^(cells.Queued | cells.Reseed | cells.ToMark))
		reseed := flags&cells.Reseed != 0
		delta := it.C.Unreplayed.Swap(0)
		markOnly := delta == 0 && !reseed
		if markOnly && flags&cells.ToMark == 0 {
			continue
		}
		if it.C.Seq() < it.W.SeqOf(now)-1 {
			// The cell can no longer affect any decision anywhere.
			r.metrics.ReplayExpired.Add(float64(delta))
			continue
		}
		inc := r.increment(it.W, it.C, delta, now)
		if r.mark != nil {
			inc.Mark = r.mark(it.W, it.C)
		}
		if markOnly && inc.Mark == 0 {
			continue // only to mark, and not worth marking (or marked)
		}
		incs = append(incs, inc)
		marksOnly = append(marksOnly, markOnly)
		sent = append(sent, it)
		if reseed && pool.IsPool(it.W) {
			reseeded = append(reseeded, it)
		}
	}
	for _, it := range reseeded {
		// A store that lost a concurrency limit's cell learns the totals
		// of this process's takes in it again too, past the answers
		// below (best effort: a read that finds it short again re-seeds
		// it again).
		incs = r.laneTotals(incs, it.W, it.C.Seq(), now)
	}
	if len(incs) == 0 {
		return
	}
	counts, _ := r.call(ctx, OpReplay, backgroundTimeout, func(ctx context.Context) ([]int64, error) {
		return r.store.Increment(ctx, incs)
	})
	for i, it := range sent {
		if i < len(counts) && counts[i] >= 0 {
			// The answer holds what the other processes added too.
			n := counts[i] + it.C.Unreplayed.Load() + it.C.Speculative.Load()
			r.models.Raise(it.W, it.C, &it.C.Count, n, now)
			cells.AtomicMax(&it.C.Stored, counts[i])
			if incs[i].Writer != "" {
				r.acked(it.W, it.C.Seq(), incs[i].Total)
			}
			continue
		}
		if incs[i].Mark > 0 {
			// Not marked after all: sent again, the cell is marked then.
			it.C.Flags.And(^cells.Marked)
		}
		if marksOnly[i] {
			it.C.Flags.Or(cells.ToMark) // still to mark
			r.QueueReplay(it.W, it.C, 0)
			continue
		}
		// Sent again next time, until its window ends (then dropped above).
		r.resend(it.W, it.C, incs[i])
	}
}

// RefreshStale reads the windows whose requests found them stale, in one
// round trip. Windows that could not be read are queued again unless they
// went idle.
func (r *Tier) RefreshStale(ctx context.Context) {
	queued := r.refreshes.Take()
	if len(queued) == 0 {
		return
	}
	seen := make(map[*cells.Window]struct{}, len(queued))
	ws := queued[:0]
	for _, w := range queued {
		if _, dup := seen[w]; !dup {
			seen[w] = struct{}{}
			ws = append(ws, w)
		}
	}
	now := r.clock.Now().UnixMilli()
	for _, w := range r.refresh(ctx, ws, now, OpStale, backgroundTimeout) {
		if !w.Idle(w.SeqOf(now) - 1) {
			r.QueueRefresh(w)
		}
	}
}

package ratelimit

import (
	"context"
	"time"
)

// cellRef is one cell of a window, as the cell queues hold it: a cell with
// increments to replay to the origin, or one grown since the last global
// flush.
type cellRef struct {
	w *window
	c *cell
}

// runOrigin replays accepted increments and refreshes stale windows every
// replayInterval until ctx is done, then replays once more so that what was
// accepted before shutdown reaches the origin.
func (s *Service) runOrigin(ctx context.Context) {
	t := time.NewTicker(replayInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.replay(context.Background())
			return
		case <-t.C:
			s.replay(ctx)
			s.refreshStale(ctx)
		}
	}
}

// replay sends every queued cell's unreplayed increments to the origin in
// one round trip, and raises each cell to the count the origin answers. An
// increment the origin did not take goes back into its cell and is sent again
// next time, for as long as its window can still affect a decision.
func (s *Service) replay(ctx context.Context) {
	items := s.replays.take()
	if len(items) == 0 {
		return
	}
	now := s.clock.Now().UnixMilli()
	incs := make([]Increment, 0, len(items))
	sent := items[:0]
	for _, it := range items {
		it.c.flags.And(^cellQueued)
		delta := it.c.unreplayed.Swap(0)
		if delta == 0 {
			continue
		}
		if it.c.seq < now/it.w.durationMs-1 {
			// The cell can no longer affect any decision anywhere.
			s.metrics.replayExpired.Add(float64(delta))
			continue
		}
		expires := (it.c.seq + 2) * it.w.durationMs
		incs = append(incs, Increment{
			Cell:  it.w.cell(it.c.seq),
			Delta: delta,
			TTL:   time.Duration(expires-now) * time.Millisecond,
		})
		sent = append(sent, it)
	}
	if len(incs) == 0 {
		return
	}
	counts, _ := s.callOrigin(ctx, opReplay, replayTimeout, func(ctx context.Context) ([]int64, error) {
		return s.origin.Increment(ctx, incs)
	})
	for i, it := range sent {
		if i < len(counts) && counts[i] >= 0 {
			atomicMax(&it.c.count, counts[i]+it.c.unreplayed.Load()+it.c.speculative.Load())
			continue
		}
		s.queueReplay(it.w, it.c, incs[i].Delta)
	}
}

// refreshStale reads the windows whose requests found them stale, in one
// round trip. Windows that could not be read are queued again unless they
// went idle.
func (s *Service) refreshStale(ctx context.Context) {
	queued := s.refreshes.take()
	if len(queued) == 0 {
		return
	}
	seen := make(map[*window]struct{}, len(queued))
	ws := queued[:0]
	for _, w := range queued {
		if _, dup := seen[w]; !dup {
			seen[w] = struct{}{}
			ws = append(ws, w)
		}
	}
	now := s.clock.Now().UnixMilli()
	for _, w := range s.refresh(ctx, ws, now, opStale, replayTimeout) {
		if !w.idle(now / w.durationMs) {
			s.queueRefresh(w)
		}
	}
}

package ratelimit

import (
	"context"
	"time"
)

// janitorInterval is how often idle windows are evicted. A window is idle
// once both its cells are older than the previous fixed window, so with the
// shortest window of 1 s an idle window lingers at most 2 s + 10 s (a
// calendar's once it holds no cell of the current period; a token bucket's
// not before it is full again, since no store holds its level). A walk
// reads each window once without locking the map as a whole: a request
// waits at most for the removal of one idle window in its bucket.
const janitorInterval = 10 * time.Second

// runJanitor evicts idle windows every interval until ctx is done.
func (s *Service) runJanitor(ctx context.Context) {
	t := time.NewTicker(s.janitorEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.windows.EvictIdle(s.clock.Now())
		}
	}
}

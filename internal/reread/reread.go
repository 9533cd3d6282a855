// Package reread runs the loop of a source that reads files again for
// changes (envoyproxy/ratelimit's rule files, the keys file): one read
// every interval, beside the loop and one at a time, so that a file system
// that stops answering delays neither the next read once it returns nor
// the end of the loop.
package reread

import (
	"context"
	"sync/atomic"
	"time"
)

// Every calls read every interval until ctx ends, in a goroutine of its
// own, skipping a tick while the previous read has not returned.
func Every(ctx context.Context, interval time.Duration, read func()) {
	var reading atomic.Bool
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if reading.CompareAndSwap(false, true) {
				go func() {
					defer reading.Store(false)
					read()
				}()
			}
		}
	}
}

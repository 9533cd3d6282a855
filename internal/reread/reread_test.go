package reread

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
)

// TestEvery: a read that hangs is not started again while it runs, and does
// not keep Every from returning once ctx ends.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var started atomic.Int32
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func() {
			started.Add(1)
			<-release
		})
	}()
	for started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // twenty ticks with the read hanging
	if n := started.Load(); n != 1 {
		t.Fatalf("%d reads started while the first hung, want 1", n)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(poll.Scaled(5 * time.Second)):
		t.Fatal("Every did not return with a read hanging")
	}
	close(release)
}

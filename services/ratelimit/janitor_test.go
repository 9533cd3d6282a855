package ratelimit

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

func TestJanitorEvictsOnlyIdleWindows(t *testing.T) {
	clock := newFakeClock(0)
	s := newTestService(t, clock)
	mustLimit(t, s, req("old", 5, time.Second, 5))
	mustLimit(t, s, req("long", 5, time.Hour, 5))
	clock.Set(1_500) // "old" has a previous cell that still counts
	if n := s.windows.EvictIdle(clock.Now()); n != 0 {
		t.Fatalf("evicted %d windows while their cells still count", n)
	}
	if resp := mustLimit(t, s, req("old", 5, time.Second, 5)); resp.Success {
		t.Fatalf("previous cell forgotten: %+v", resp)
	}
	clock.Set(3_000) // window 3: cells 0 and 1 of "old" no longer count
	if n := s.windows.EvictIdle(clock.Now()); n != 1 {
		t.Fatalf("evicted %d windows, want 1", n)
	}
	if got := s.ActiveWindows(); got != 1 {
		t.Fatalf("ActiveWindows = %d, want 1 (the hour window)", got)
	}
	if resp := mustLimit(t, s, req("long", 5, time.Hour, 1)); resp.Success {
		t.Fatal("the hour window lost its count")
	}
}

func TestJanitorEvictsCollidedWindows(t *testing.T) {
	clock := newFakeClock(0)
	s := newTestService(t, clock)
	s.windows.HashKey = func(cells.Key, maphash.Seed) uint64 { return 1 }
	mustLimit(t, s, req("a", 5, time.Second, 1))
	mustLimit(t, s, req("b", 5, time.Second, 1))
	clock.Set(5_000)
	if n := s.windows.EvictIdle(clock.Now()); n != 2 || s.ActiveWindows() != 0 {
		t.Fatalf("evicted %d, %d left; want 2 and 0", n, s.ActiveWindows())
	}
}

// TestCountIntoEvictedWindowIsTakenBack marks a window evicted the way the
// janitor does before it removes it: a request that counts into it takes the
// count back and does not report success on a window about to vanish.
func TestCountIntoEvictedWindowIsTakenBack(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	w := mustWindow(t, s, &cells.Key{Workspace: "ws", Namespace: "ns", Identifier: "k", Period: period.OfLength(1000)})
	w.SetEvicted(true)
	resp := mustLimit(t, s, req("k", 5, time.Second, 1))
	cur, _, _ := w.CellsAt(0, true)
	if resp.Success || cur.Count.Load() != 0 {
		t.Fatalf("got %+v with count %d, want a denial and nothing counted in the evicted window", resp, cur.Count.Load())
	}
	if _, err := s.MultiLimit(context.Background(), []Request{req("k", 5, time.Second, 1)}); err != nil {
		t.Fatal(err)
	}
	if cur.Count.Load() != 0 || cur.Speculative.Load() != 0 {
		t.Fatalf("batch left count %d speculative %d in the evicted window", cur.Count.Load(), cur.Speculative.Load())
	}
}

// TestJanitorUnderLoad runs the janitor in a tight loop while requests move
// through windows; in every window no more than the limit is admitted.
func TestJanitorUnderLoad(t *testing.T) {
	clock := newFakeClock(0)
	s := newTestService(t, clock)
	const limit = 20
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				s.windows.EvictIdle(clock.Now())
			}
		}
	}()
	var perWindow [128]atomic.Int64 // 30 jumps of 3 windows
	var workers sync.WaitGroup
	for g := 0; g < 8; g++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := 0; i < 3000; i++ {
				now := clock.ms.Load()
				if resp := mustLimit(t, s, req("k", limit, time.Second, 1)); resp.Success {
					perWindow[resp.Reset.UnixMilli()/1000-1].Add(1)
				}
				// Jump three windows ahead, so that the previous cell never
				// counts, each window stands alone and the janitor may evict
				// the key between jumps.
				if i%100 == 0 && g == 0 {
					clock.Set((now/1000 + 3) * 1000)
				}
			}
		}()
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	for i := range perWindow {
		if n := perWindow[i].Load(); n > limit {
			t.Fatalf("window %d admitted %d of %d", i, n, limit)
		}
	}
}

// TestRunStopsWhenCancelled: Run returns nil once its context is cancelled,
// refuses a second Run while it runs, and runs again after.
func TestRunStopsWhenCancelled(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	s.janitorEvery = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	poll.Until(t, 5*time.Second, "Run to start", s.running.Load)
	if err := s.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Fatalf("a second Run = %v, want ErrRunning", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(poll.Scaled(5 * time.Second)):
		t.Fatal("Run did not return after its context was cancelled")
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := s.Run(ctx2); err != nil {
		t.Fatalf("Run after the first returned = %v, want nil", err)
	}
}

// TestWorkspaceCap: a workspace at its cap gets a CapacityError for a new
// key and nothing is counted, other workspaces and held keys are not
// affected, and a window the janitor removes frees its place.
func TestWorkspaceCap(t *testing.T) {
	clock := newFakeClock(0)
	s := newTestService(t, clock, WithMaxWindowsPerWorkspace(3))
	for _, id := range []string{"a", "b", "c"} {
		mustLimit(t, s, req(id, 5, time.Second, 1))
	}
	_, err := s.Limit(context.Background(), req("d", 5, time.Second, 1))
	var ce *CapacityError
	if !errors.As(err, &ce) || ce.Max != 3 {
		t.Fatalf("fourth key: %v, want a CapacityError with Max 3", err)
	}
	if _, err := s.MultiLimit(context.Background(), []Request{req("a", 5, time.Second, 1), req("d", 5, time.Second, 1)}); !errors.As(err, &ce) {
		t.Fatalf("batch with a fourth key: %v, want a CapacityError", err)
	}
	if got := mustLimit(t, s, req("a", 5, time.Second, 0)).Remaining; got != 4 {
		t.Fatalf("held key after the refused batch: remaining %d, want 4 (nothing counted)", got)
	}
	other := req("d", 5, time.Second, 1)
	other.Workspace = "other"
	mustLimit(t, s, other)
	clock.Advance(3 * time.Second)
	s.windows.EvictIdle(clock.Now())
	if resp := mustLimit(t, s, req("d", 5, time.Second, 1)); !resp.Success {
		t.Fatalf("after eviction: %+v, want the freed place used", resp)
	}
	if got := testutil.ToFloat64(s.metrics.windowsRejected.WithLabelValues("request")); got != 2 {
		t.Fatalf("rejected windows = %v, want 2", got)
	}
}

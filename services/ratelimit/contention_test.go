package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
)

// withBeforeCAS runs f before every compare-and-swap of a decision.
func withBeforeCAS(f func(w *cells.Window, c *cells.Cell, attempt int)) Option {
	return func(s *settings) { s.beforeCAS = f }
}

// rival returns a beforeCAS hook that, the first n times, admits one unit
// as another decision would between the decision's read and its
// compare-and-swap (into the cell, and a bucket's instant too), so that
// the compare-and-swap fails: a race lost n times in a row, whatever the
// scheduler does.
func rival(s **Service, n int) (func(w *cells.Window, c *cells.Cell, attempt int), *atomic.Int64) {
	var lost atomic.Int64
	return func(w *cells.Window, c *cells.Cell, attempt int) {
		if lost.Load() >= int64(n) {
			return
		}
		lost.Add(1)
		(*s).windows.TakeTokens(w, 1, (*s).clock.Now().UnixNano())
		c.Count.Add(1)
	}, &lost
}

// TestLostRacesNeverDeny: a decision that loses its race to count any
// number of times in a row (1, up to and past cells.FastCASAttempts, past the 64
// after which it used to be refused, a thousand) is admitted when the
// limit admits it once the rivals are counted, and refused when they took
// what was left: never refused for losing. Past cells.FastCASAttempts it took
// the key's lock, once, and left no flag behind. Alone and in a batch
// (which counts speculatively).
func TestLostRacesNeverDeny(t *testing.T) {
	for name, base := range models(t, "hot", 0) {
		for _, n := range []int{1, cells.FastCASAttempts - 1, cells.FastCASAttempts, cells.FastCASAttempts + 1, 64, 65, 1000} {
			for _, c := range []struct {
				room  int64
				multi bool
			}{{1, false}, {0, false}, {1, true}, {0, true}} {
				room, multi := c.room, c.multi
				t.Run(fmt.Sprintf("%s/lost=%d/room=%d/multi=%v", name, n, room, multi), func(t *testing.T) {
					var s *Service
					hook, lost := rival(&s, n)
					s = newTestService(t, newFakeClock(1_000_000_000_000), withBeforeCAS(hook))
					r := base
					r.Limit = int64(n) + room
					if r.Algorithm == TokenBucket {
						r.Limit, r.Burst = 1, int64(n)+room // a token an hour: none refills meanwhile
						r.Duration = time.Hour
					}
					var resp Response
					if multi {
						// A batch counts speculatively (cells.Window.ApplySpeculative; a bucket by its transitions).
						mr, err := s.MultiLimit(context.Background(), []Request{r})
						if err != nil {
							t.Fatal(err)
						}
						resp = mr.Results[0]
						if mr.Passed != resp.Success {
							t.Fatalf("batch passed %v, its one limit %v", mr.Passed, resp.Success)
						}
					} else {
						resp = mustLimit(t, s, r)
					}
					if lost.Load() != int64(n) {
						t.Fatalf("the rivals won %d races, want %d", lost.Load(), n)
					}
					if resp.Success != (room > 0) {
						t.Fatalf("after losing %d races with room for %d more: %+v", n, room, resp)
					}
					w, _ := s.windows.ForRequest(ptr(keyOf(&r)))
					c, _ := w.CellAt(w.SeqOf(s.clock.Now().UnixMilli()), true)
					if got, want := c.Count.Load(), int64(n)+room; got != want {
						t.Fatalf("the cell counts %d, want %d (the rivals' %d and this decision's %d)", got, want, n, room)
					}
					wantLocks := 0.0
					if n >= cells.FastCASAttempts {
						wantLocks = 1
					}
					if got := testutil.ToFloat64(s.metrics.contended); got != wantLocks {
						t.Fatalf("contended decisions = %v, want %v", got, wantLocks)
					}
					if c.Flags.Load()&cells.Contended != 0 {
						t.Fatal("the cell is still flagged contended")
					}
				})
			}
		}
	}
}

// TestContendedKeyQueues: a decision on a cell flagged contended (another
// decision holds its key's lock) takes the lock before its first try, so
// that the holder races only decisions that were already trying.
func TestContendedKeyQueues(t *testing.T) {
	for name, r := range models(t, "hot", 100) {
		t.Run(name, func(t *testing.T) {
			var s *Service
			var tries, unlockedTries atomic.Int64
			s = newTestService(t, newFakeClock(1_000_000_000_000), withBeforeCAS(func(w *cells.Window, c *cells.Cell, attempt int) {
				tries.Add(1)
				mu := s.windows.Contention.Stripe(c)
				if mu.TryLock() {
					unlockedTries.Add(1)
					mu.Unlock()
				}
			}))
			mustLimit(t, s, r)
			if unlockedTries.Load() != 1 {
				t.Fatalf("an uncontended decision tried %d times without the lock, want 1", unlockedTries.Load())
			}
			w, _ := s.windows.ForRequest(ptr(keyOf(&r)))
			c, _ := w.CellAt(w.SeqOf(s.clock.Now().UnixMilli()), true)
			c.Flags.Or(cells.Contended)
			if resp := mustLimit(t, s, r); !resp.Success {
				t.Fatalf("denied: %+v", resp)
			}
			if tries.Load() != 2 || unlockedTries.Load() != 1 {
				t.Fatalf("on a contended cell: %d tries, %d of them without the lock; want 1 try, with it", tries.Load()-1, unlockedTries.Load()-1)
			}
			if c.Flags.Load()&cells.Contended != 0 {
				t.Fatal("the cell is still flagged contended after the decision")
			}
		})
	}
}

// TestHotKeyCountsExactly: 32 goroutines on one key, more than the cores,
// decide 500 requests each: with room for all, all are admitted; with room
// for half, exactly half. (Two cores seldom lose four races in a row, so
// this holds the counting to account, not the lock: TestLockHolderRaces
// does that.)
func TestHotKeyCountsExactly(t *testing.T) {
	const workers, each = 32, 500
	for name, base := range models(t, "hot", 0) {
		for _, room := range []int64{workers * each, workers * each / 2} {
			t.Run(fmt.Sprintf("%s/room=%d", name, room), func(t *testing.T) {
				s := newTestService(t, newFakeClock(1_000_000_000_000))
				r := base
				r.Limit = room
				if r.Algorithm == TokenBucket {
					r.Limit, r.Burst, r.Duration = 1, room, time.Hour
				}
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						for range each {
							resp, err := s.Limit(context.Background(), r)
							if err != nil {
								t.Error(err)
								return
							}
							if resp.Success {
								admitted.Add(1)
							}
						}
					})
				}
				wg.Wait()
				if admitted.Load() != room {
					t.Fatalf("admitted %d with room for %d", admitted.Load(), room)
				}
				t.Logf("%d decisions took the key's lock", int(testutil.ToFloat64(s.metrics.contended)))
			})
		}
	}
}

// TestLockHolderRaces: a decision that took the key's lock after losing
// cells.FastCASAttempts races, and a second decision started while it holds it
// (which finds the cell flagged and queues, or, if it read the flag before,
// races), a cost-0 check in between: both are admitted, the count is
// exact, the check counts nothing, and no flag is left.
func TestLockHolderRaces(t *testing.T) {
	for name, base := range models(t, "hot", 0) {
		t.Run(name, func(t *testing.T) {
			var s *Service
			var lost atomic.Int64
			second := make(chan Response, 1)
			var r Request
			s = newTestService(t, newFakeClock(1_000_000_000_000), withBeforeCAS(func(w *cells.Window, c *cells.Cell, attempt int) {
				switch n := lost.Add(1); {
				case n <= cells.FastCASAttempts:
					c.Count.Add(1) // a rival wins
					s.windows.TakeTokens(w, 1, s.clock.Now().UnixNano())
				case n == cells.FastCASAttempts+1:
					// The first decision holds the lock now.
					if c.Flags.Load()&cells.Contended == 0 {
						t.Error("the lock holder's cell is not flagged")
					}
					go func() {
						resp, _ := s.Limit(context.Background(), r)
						second <- resp
					}()
				}
			}))
			r = base
			r.Limit = 100
			if r.Algorithm == TokenBucket {
				r.Limit, r.Burst, r.Duration = 1, 100, time.Hour
			}
			if resp := mustLimit(t, s, r); !resp.Success {
				t.Fatalf("the holder: %+v", resp)
			}
			if resp := <-second; !resp.Success {
				t.Fatalf("the second: %+v", resp)
			}
			check := r
			check.Cost = 0
			if resp := mustLimit(t, s, check); !resp.Success || resp.Remaining != 100-cells.FastCASAttempts-2 {
				t.Fatalf("the check after: %+v, want %d remaining", resp, 100-cells.FastCASAttempts-2)
			}
			w, _ := s.windows.ForRequest(ptr(keyOf(&r)))
			c, _ := w.CellAt(w.SeqOf(s.clock.Now().UnixMilli()), true)
			if got := c.Count.Load(); got != cells.FastCASAttempts+2 {
				t.Fatalf("the cell counts %d, want the rivals' %d and the two decisions", got, cells.FastCASAttempts)
			}
			if c.Flags.Load()&cells.Contended != 0 {
				t.Fatal("the cell is still flagged contended")
			}
		})
	}
}

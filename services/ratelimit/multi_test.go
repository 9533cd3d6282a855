package ratelimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

func mustMulti(t testing.TB, s *Service, reqs ...Request) MultiResponse {
	t.Helper()
	resp, err := s.MultiLimit(context.Background(), reqs)
	if err != nil {
		t.Fatalf("MultiLimit: %v", err)
	}
	return resp
}

// remaining asks with cost 0, which never counts, how much is left.
func remaining(t testing.TB, s *Service, id string, limit int64) int64 {
	t.Helper()
	return mustLimit(t, s, req(id, limit, time.Minute, 0)).Remaining
}

func TestMultiLimitLastEntryFailsRollsBackAll(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	mustLimit(t, s, req("c", 2, time.Minute, 2)) // c is full
	resp := mustMulti(t, s,
		req("a", 10, time.Minute, 3),
		req("b", 10, time.Minute, 4),
		req("c", 2, time.Minute, 1),
	)
	if resp.Passed {
		t.Fatal("batch with a full limit passed")
	}
	if !resp.Results[0].Success || !resp.Results[1].Success || resp.Results[2].Success {
		t.Fatalf("per-limit verdicts = %v %v %v, want true true false",
			resp.Results[0].Success, resp.Results[1].Success, resp.Results[2].Success)
	}
	if resp.Results[0].Remaining != 10 || resp.Results[1].Remaining != 10 {
		t.Fatalf("rolled-back results report remaining %d and %d, want 10 and 10 (nothing counted)",
			resp.Results[0].Remaining, resp.Results[1].Remaining)
	}
	if a, b := remaining(t, s, "a", 10), remaining(t, s, "b", 10); a != 10 || b != 10 {
		t.Fatalf("after rollback a has %d and b %d remaining, want 10 and 10", a, b)
	}
	for _, id := range []string{"a", "b"} {
		w := mustWindow(t, s, &cells.Key{Workspace: "ws", Namespace: "ns", Identifier: id, Period: period.OfLength(60_000)})
		cur, _, _ := w.CellsAt(0, true)
		if n, s := cur.Count.Load(), cur.Speculative.Load(); n != 0 || s != 0 {
			t.Fatalf("%s: count %d speculative %d after rollback, want 0 0", id, n, s)
		}
	}
}

func TestMultiLimitCommits(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	resp := mustMulti(t, s, req("a", 10, time.Minute, 3), req("b", 5, time.Minute, 5))
	if !resp.Passed || resp.Results[0].Remaining != 7 || resp.Results[1].Remaining != 0 {
		t.Fatalf("got %+v, want passed with 7 and 0 remaining", resp)
	}
	if a, b := remaining(t, s, "a", 10), remaining(t, s, "b", 5); a != 7 || b != 0 {
		t.Fatalf("after commit a has %d and b %d remaining, want 7 and 0", a, b)
	}
	w := mustWindow(t, s, &cells.Key{Workspace: "ws", Namespace: "ns", Identifier: "a", Period: period.OfLength(60_000)})
	cur, _, _ := w.CellsAt(0, true)
	if n, ok := w.Committed(cur); !ok || n != 3 {
		t.Fatalf("committed count = %d (%v), want 3", n, ok)
	}
}

func TestMultiLimitDuplicateKeysAccumulate(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	resp := mustMulti(t, s, req("a", 3, time.Minute, 2), req("a", 3, time.Minute, 2))
	if resp.Passed || !resp.Results[0].Success || resp.Results[1].Success {
		t.Fatalf("2+2 of 3 on one key: %+v, want the second to fail and the batch to roll back", resp)
	}
	if got := remaining(t, s, "a", 3); got != 3 {
		t.Fatalf("remaining after rollback = %d, want 3", got)
	}
	// Nothing was counted, so every entry reports the whole limit left.
	for i, r := range resp.Results {
		if r.Remaining != 3 {
			t.Fatalf("result %d of a failed batch: remaining %d, want 3 (nothing counted)", i, r.Remaining)
		}
	}
	resp = mustMulti(t, s, req("a", 3, time.Minute, 1), req("a", 3, time.Minute, 2))
	if !resp.Passed || resp.Results[1].Remaining != 0 {
		t.Fatalf("1+2 of 3 on one key: %+v, want passed with 0 remaining", resp)
	}
	if got := remaining(t, s, "a", 3); got != 0 {
		t.Fatalf("remaining after commit = %d, want 0", got)
	}
}

func TestMultiLimitValidation(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	_, err := s.MultiLimit(context.Background(), nil)
	var ve *invalid.Error
	if !errors.As(err, &ve) || ve.Field != "limits" {
		t.Fatalf("empty batch: %v, want a validation error on limits", err)
	}
	_, err = s.MultiLimit(context.Background(), make([]Request, MaxBatch+1))
	if !errors.As(err, &ve) || ve.Field != "limits" {
		t.Fatalf("oversized batch: %v, want a validation error on limits", err)
	}
	bad := req("b", 5, time.Minute, -1)
	_, err = s.MultiLimit(context.Background(), []Request{req("a", 5, time.Minute, 1), bad})
	if !errors.As(err, &ve) || ve.Field != "limits[1].cost" {
		t.Fatalf("bad second entry: %v, want a validation error on limits[1].cost", err)
	}
	if got := remaining(t, s, "a", 5); got != 5 {
		t.Fatalf("an invalid batch counted: %d remaining, want 5", got)
	}
}

// TestMultiLimitConcurrentNeverOverAdmits runs batches and single requests on
// the same keys from many goroutines and checks that what was admitted per
// key never exceeds its limit and equals the committed count.
func TestMultiLimitConcurrentNeverOverAdmits(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	ids := []string{"x", "y", "z"}
	const limit = 50
	var mu sync.Mutex
	admitted := map[string]int64{}
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 9))
			for i := 0; i < 200; i++ {
				if rng.IntN(2) == 0 {
					id := ids[rng.IntN(len(ids))]
					cost := int64(1 + rng.IntN(3))
					if mustLimit(t, s, req(id, limit, time.Minute, cost)).Success {
						mu.Lock()
						admitted[id] += cost
						mu.Unlock()
					}
					continue
				}
				n := 1 + rng.IntN(4)
				batch := make([]Request, n)
				for j := range batch {
					batch[j] = req(ids[rng.IntN(len(ids))], limit, time.Minute, int64(1+rng.IntN(3)))
				}
				if mustMulti(t, s, batch...).Passed {
					mu.Lock()
					for _, r := range batch {
						admitted[r.Identifier] += r.Cost
					}
					mu.Unlock()
				}
			}
		}(uint64(g))
	}
	wg.Wait()
	for _, id := range ids {
		w := mustWindow(t, s, &cells.Key{Workspace: "ws", Namespace: "ns", Identifier: id, Period: period.OfLength(60_000)})
		cur, _, _ := w.CellsAt(0, true)
		n, ok := w.Committed(cur)
		if !ok || n != admitted[id] || cur.Speculative.Load() != 0 {
			t.Fatalf("%s: committed %d (%v), speculative %d, admitted %d", id, n, ok, cur.Speculative.Load(), admitted[id])
		}
		if n > limit {
			t.Fatalf("%s: admitted %d of limit %d", id, n, limit)
		}
	}
}

// TestCommittedNeverShowsSpeculative reads the committed count while batches
// apply and roll back increments: no read may include a rolled-back one.
func TestCommittedNeverShowsSpeculative(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	mustLimit(t, s, req("k", 1_000_000, time.Minute, 5))
	w := mustWindow(t, s, &cells.Key{Workspace: "ws", Namespace: "ns", Identifier: "k", Period: period.OfLength(60_000)})
	cur, _, _ := w.CellsAt(0, true)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := cur.Count.Load()
				if w.ApplySpeculative(cur, n, 7) {
					w.Rollback(cur, 7)
				}
			}
		}()
	}
	for i := 0; i < 200_000; i++ {
		if n, ok := w.Committed(cur); ok && n != 5 {
			close(stop)
			wg.Wait()
			t.Fatalf("committed read %d, want 5", n)
		}
	}
	close(stop)
	wg.Wait()
}

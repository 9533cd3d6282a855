package ratelimit

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

func newTestService(t testing.TB, clock Clock, opts ...Option) *Service {
	t.Helper()
	s, err := New("test", append([]Option{WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func req(id string, limit int64, dur time.Duration, cost int64) Request {
	return Request{Workspace: "ws", Namespace: "ns", Identifier: id, Limit: limit, Duration: dur, Cost: cost}
}

func mustLimit(t testing.TB, s *Service, r Request) Response {
	t.Helper()
	resp, err := s.Limit(context.Background(), r)
	if err != nil {
		t.Fatalf("Limit(%+v): %v", r, err)
	}
	return resp
}

func TestNewRequiresRegion(t *testing.T) {
	if _, err := New(""); !errors.Is(err, ErrRegionRequired) {
		t.Fatalf("New(\"\") = %v, want ErrRegionRequired", err)
	}
}

// TestSlidingWindowEdges spends 8 of 10 in window 0, then asks in window 1 at
// elapsed 0, in the middle and in the last millisecond, where the previous
// cell weighs 8, 4 and 0.
func TestSlidingWindowEdges(t *testing.T) {
	const dur = time.Second
	cases := []struct {
		name     string
		at       int64 // ms into window 1
		admitted int64 // how many cost-1 requests pass
	}{
		{"elapsed 0", 0, 2},           // 8 + n <= 10
		{"middle", 500, 6},            // trunc(8*0.5)=4; 4 + n <= 10
		{"one ms in", 1, 3},           // trunc(8*0.999)=7; 7 + n <= 10
		{"last millisecond", 999, 10}, // trunc(8*0.001)=0
		{"three quarters", 750, 8},    // trunc(8*0.25)=2
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock(10_000) // the start of window 10
			s := newTestService(t, clock)
			for i := 0; i < 8; i++ {
				if !mustLimit(t, s, req("u", 10, dur, 1)).Success {
					t.Fatalf("request %d of the previous window denied", i)
				}
			}
			clock.Set(11_000 + tc.at)
			var passed int64
			for i := 0; i < 20; i++ {
				resp := mustLimit(t, s, req("u", 10, dur, 1))
				if resp.Success {
					passed++
				}
				if got, want := resp.Reset, time.UnixMilli(12_000); !got.Equal(want) {
					t.Fatalf("reset = %v, want %v", got, want)
				}
			}
			if passed != tc.admitted {
				t.Fatalf("admitted %d, want %d", passed, tc.admitted)
			}
		})
	}
}

func TestRemainingAndRetryAfter(t *testing.T) {
	clock := newFakeClock(0)
	s := newTestService(t, clock)
	r := req("u", 5, 10*time.Second, 2)
	for _, want := range []int64{3, 1} {
		resp := mustLimit(t, s, r)
		if !resp.Success || resp.Remaining != want || resp.RetryAfter != 0 {
			t.Fatalf("got %+v, want success with remaining %d", resp, want)
		}
	}
	resp := mustLimit(t, s, r)
	// Denied: 4 used, 1 left for a cost-2 request.
	if resp.Success || resp.Remaining != 1 {
		t.Fatalf("got %+v, want denial with remaining 1", resp)
	}
	// The count of 4 must fall to 3 in the next window: 4*(1-e) < 4 as soon
	// as e > 0, so the first millisecond of the next window.
	if want := 10*time.Second + time.Millisecond; resp.RetryAfter != want {
		t.Fatalf("retryAfter = %v, want %v", resp.RetryAfter, want)
	}
}

func TestCostZero(t *testing.T) {
	clock := newFakeClock(0)
	s := newTestService(t, clock)
	for i := 0; i < 3; i++ {
		resp := mustLimit(t, s, req("u", 3, time.Minute, 0))
		if !resp.Success || resp.Remaining != 3 {
			t.Fatalf("cost 0 on an empty window: %+v, want success with 3 remaining", resp)
		}
	}
	for i := 0; i < 3; i++ {
		mustLimit(t, s, req("u", 3, time.Minute, 1))
	}
	resp := mustLimit(t, s, req("u", 3, time.Minute, 0))
	if !resp.Success || resp.Remaining != 0 {
		t.Fatalf("cost 0 on a full window: %+v, want success (effective == limit) with 0 remaining", resp)
	}
	if resp := mustLimit(t, s, req("u", 3, time.Minute, 1)); resp.Success {
		t.Fatalf("cost 1 on a full window passed: %+v", resp)
	}
}

func TestCostEqualToLimit(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	if resp := mustLimit(t, s, req("u", 7, time.Minute, 7)); !resp.Success || resp.Remaining != 0 {
		t.Fatalf("cost == limit on an empty window: %+v", resp)
	}
	if resp := mustLimit(t, s, req("u", 7, time.Minute, 1)); resp.Success {
		t.Fatalf("a request after cost == limit passed: %+v", resp)
	}
}

func TestCostAboveLimit(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	resp := mustLimit(t, s, req("u", 5, time.Minute, 6))
	if resp.Success || resp.RetryAfter != 0 || resp.Remaining != 5 {
		t.Fatalf("cost > limit: %+v, want denial with retryAfter 0 and 5 remaining", resp)
	}
	if resp := mustLimit(t, s, req("u", 5, time.Minute, 5)); !resp.Success {
		t.Fatalf("the oversized request counted: %+v", resp)
	}
}

// TestPreviousCellAloneExceedsLimit lowers the limit after a window spent 10:
// at the start of the next window the previous cell alone is over the new
// limit of 4, so even cost 0 is denied until its weight falls.
func TestPreviousCellAloneExceedsLimit(t *testing.T) {
	clock := newFakeClock(0)
	s := newTestService(t, clock)
	for i := 0; i < 10; i++ {
		mustLimit(t, s, req("u", 10, time.Second, 1))
	}
	clock.Set(1_000)
	resp := mustLimit(t, s, req("u", 4, time.Second, 0))
	if resp.Success || resp.Remaining != 0 {
		t.Fatalf("cost 0 with the previous cell at 10 of 4: %+v, want denial", resp)
	}
	// Cost 0 needs trunc(10*(1-e)) <= 4, so e > 0.5: elapsed 501 ms.
	if want := 501 * time.Millisecond; resp.RetryAfter != want {
		t.Fatalf("retryAfter = %v, want %v", resp.RetryAfter, want)
	}
	clock.Set(1_500)
	if resp := mustLimit(t, s, req("u", 4, time.Second, 0)); resp.Success {
		t.Fatalf("cost 0 one ms before retryAfter passed: %+v", resp)
	}
	clock.Set(1_501)
	if resp := mustLimit(t, s, req("u", 4, time.Second, 0)); !resp.Success {
		t.Fatalf("cost 0 at retryAfter denied: %+v", resp)
	}
	// Cost 1 needs trunc(10*(1-e)) <= 3, so e > 0.6: elapsed 601 ms.
	clock.Set(1_601)
	if resp := mustLimit(t, s, req("u", 4, time.Second, 1)); !resp.Success || resp.Remaining != 0 {
		t.Fatalf("after retryAfter: %+v, want success with 0 remaining", resp)
	}
}

func TestGlobalCountsAreAddedToDecisions(t *testing.T) {
	clock := newFakeClock(0)
	s := newTestService(t, clock)
	mustLimit(t, s, req("u", 10, time.Second, 1))
	w := mustWindow(t, s, &cells.Key{Workspace: "ws", Namespace: "ns", Identifier: "u", Period: period.OfLength(1000)})
	cur, _, _ := w.CellsAt(0, true)
	cur.Global.Store(8)
	if resp := mustLimit(t, s, req("u", 10, time.Second, 1)); !resp.Success || resp.Remaining != 0 {
		t.Fatalf("1 own + 8 imported + 1: %+v, want success with 0 remaining", resp)
	}
	if resp := mustLimit(t, s, req("u", 10, time.Second, 1)); resp.Success {
		t.Fatalf("over the limit with imported counts: %+v", resp)
	}
}

func TestWorkspacesAndDurationsAreSeparate(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	a := req("u", 1, time.Minute, 1)
	b := a
	b.Workspace = "other"
	c := a
	c.Duration = time.Hour
	for _, r := range []Request{a, b, c} {
		if !mustLimit(t, s, r).Success {
			t.Fatalf("first request of %+v denied: keys share a counter", r)
		}
	}
}

// TestOneKeyManyGoroutines sends 1,000 concurrent requests at one key with
// limit 100: exactly 100 pass.
func TestOneKeyManyGoroutines(t *testing.T) {
	s := newTestService(t, newFakeClock(5_000))
	var passed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if mustLimit(t, s, req("hot", 100, time.Minute, 1)).Success {
				passed.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := passed.Load(); got != 100 {
		t.Fatalf("%d passed, want exactly 100", got)
	}
}

// TestStaleClockReading decides a request whose clock reading is older than
// the window another request already moved on to: it is decided at the start
// of the newer window, never in a cell that no longer exists.
func TestStaleClockReading(t *testing.T) {
	clock := newFakeClock(0)
	s := newTestService(t, clock)
	for i := 0; i < 4; i++ {
		mustLimit(t, s, req("u", 4, time.Second, 1))
	}
	clock.Set(2_500) // window 2; window 0 is dropped from its slot
	mustLimit(t, s, req("u", 4, time.Second, 1))
	clock.Set(500) // a late request from window 0
	resp := mustLimit(t, s, req("u", 4, time.Second, 1))
	if !resp.Success || !resp.Reset.Equal(time.UnixMilli(3_000)) {
		t.Fatalf("stale request: %+v, want success decided in window 2", resp)
	}
	w := mustWindow(t, s, &cells.Key{Workspace: "ws", Namespace: "ns", Identifier: "u", Period: period.OfLength(1000)})
	cur, _, _ := w.CellsAt(2, true)
	if got := cur.Count.Load(); got != 2 {
		t.Fatalf("window 2 count = %d, want 2", got)
	}
}

func TestHashCollisionsKeepKeysApart(t *testing.T) {
	s := newTestService(t, newFakeClock(0))
	s.windows.HashKey = func(cells.Key, maphash.Seed) uint64 { return 42 }
	for _, id := range []string{"a", "b", "c"} {
		if resp := mustLimit(t, s, req(id, 1, time.Second, 1)); !resp.Success {
			t.Fatalf("first request of %q denied: colliding keys share a counter", id)
		}
		if resp := mustLimit(t, s, req(id, 1, time.Second, 1)); resp.Success {
			t.Fatalf("second request of %q passed: colliding key lost its count", id)
		}
	}
	if got := s.ActiveWindows(); got != 3 {
		t.Fatalf("ActiveWindows = %d, want 3", got)
	}
}

// mustWindow returns the window of k, creating it.
func mustWindow(t testing.TB, s *Service, k *cells.Key) *cells.Window {
	t.Helper()
	w, err := s.windows.ForRequest(k)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLimitZeroBlocks: a limit of 0 (an override that blocks) is denied by
// the limiter on its clock, with nothing left, no wait that helps, and the
// reset at the end of the current fixed window; no window is held for it,
// however many identifiers are blocked.
func TestLimitZeroBlocks(t *testing.T) {
	clock := newFakeClock(90_500)
	s := newTestService(t, clock)
	for _, id := range []string{"a", "b", "c"} {
		resp, err := s.Decide(context.Background(), req(id, 0, time.Minute, 1))
		if err != nil || resp.Success || resp.Remaining != 0 || resp.RetryAfter != 0 || resp.Limit != 0 ||
			!resp.Reset.Equal(time.UnixMilli(120_000)) {
			t.Fatalf("Decide with limit 0: %+v, %v; want denied, reset at 120000", resp, err)
		}
	}
	if n := s.ActiveWindows(); n != 0 {
		t.Fatalf("blocked requests hold %d windows, want none", n)
	}
}

// TestMultiWithABlockedEntry: a batch with an entry a limit of 0 blocks
// fails and counts nothing; the blocked entry answers as Decide does, the
// others what is left for them.
func TestMultiWithABlockedEntry(t *testing.T) {
	clock := newFakeClock(10_000)
	s := newTestService(t, clock)
	mustLimit(t, s, req("open", 5, time.Second, 2))
	resp, err := s.DecideAll(context.Background(), []Request{req("open", 5, time.Second, 1), req("shut", 0, time.Second, 1)})
	if err != nil || resp.Passed {
		t.Fatalf("DecideAll: %+v, %v; want failed", resp, err)
	}
	if r := resp.Results[0]; !r.Success || r.Remaining != 3 || r.Limit != 5 {
		t.Fatalf("the open entry: %+v, want what is left without the batch (3 of 5)", r)
	}
	if r := resp.Results[1]; r.Success || r.Remaining != 0 || !r.Reset.Equal(time.UnixMilli(11_000)) {
		t.Fatalf("the blocked entry: %+v", r)
	}
	if got := mustLimit(t, s, req("open", 5, time.Second, 0)).Remaining; got != 3 {
		t.Fatalf("after the failed batch: remaining %d, want 3 (nothing counted)", got)
	}
}

// TestCapacityErrorAnswersTheReset: a request refused for its workspace's
// cap still gets its limit and the window's reset, for the answer.
func TestCapacityErrorAnswersTheReset(t *testing.T) {
	clock := newFakeClock(2_500)
	s := newTestService(t, clock, WithMaxWindowsPerWorkspace(1))
	mustLimit(t, s, req("a", 5, time.Second, 1))
	resp, err := s.Decide(context.Background(), req("b", 5, time.Second, 1))
	var ce *CapacityError
	if !errors.As(err, &ce) || resp.Limit != 5 || !resp.Reset.Equal(time.UnixMilli(3_000)) || resp.Success {
		t.Fatalf("Decide over the cap: %+v, %v", resp, err)
	}
}

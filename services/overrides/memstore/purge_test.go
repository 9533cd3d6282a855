package memstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/overrides/store"
)

type manualClock struct{ us atomic.Int64 }

func (c *manualClock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// TestTombstonesArePurged: a caller that creates and deletes overrides
// under ever new identifiers holds the store's rows to what it did in
// TombstoneMemory (the log to twice what it held at most), and a poll
// after the purge still sees every live override's latest state.
func TestTombstonesArePurged(t *testing.T) {
	clock := &manualClock{}
	clock.us.Store(time.Hour.Microseconds())
	s := New(WithClock(clock))
	ctx := context.Background()
	keep, err := s.Set(ctx, store.Override{ID: "ovr_keep", Workspace: "ws", Namespace: "ns", Identifier: "keep", Limit: 1, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10_100 {
		if i == 10_000 {
			clock.us.Add((TombstoneMemory + time.Second).Microseconds())
		}
		id := fmt.Sprint("churn_", i)
		if _, err := s.Set(ctx, store.Override{ID: "ovr_" + id, Workspace: "ws", Namespace: "ns", Identifier: id, Limit: 1, Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Delete(ctx, "ws", "ns", id); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	rows, log := len(s.rows), len(s.log)
	s.mu.Unlock()
	if rows != 101 || log > 2*20_200+64 {
		t.Fatalf("after 10,100 created and deleted, 10,000 of them past TombstoneMemory: %d rows, %d log entries; want 101 rows", rows, log)
	}
	changes, err := s.Changes(ctx, keep.Revision)
	if err != nil || len(changes) == 0 || changes[0].Identifier != "keep" {
		t.Fatalf("Changes since the first: %d, %v; want the live override first", len(changes), err)
	}
}

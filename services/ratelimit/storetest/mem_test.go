package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

func TestMemRegional(t *testing.T) {
	TestRegional(t, func(*testing.T) store.Regional { return NewMemRegional() })
}

func TestMemGlobal(t *testing.T) {
	TestGlobal(t, func(*testing.T) store.Global { return NewMemGlobal() })
}

// TestWriteFaults: a lost write is not applied and fails; a late one is
// applied and fails; one applied twice is applied twice and answers the
// second (an increment adds twice; a take, a total, counts once); each for
// an increment and for slots taken.
func TestWriteFaults(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		fault                 WriteFault
		applied, slotsApplied int64
		fails                 bool
	}{{WriteOK, 1, 1, false}, {WriteLost, 0, 0, true}, {WriteLate, 1, 1, true}, {WriteTwice, 2, 1, false}} {
		mem := NewMemRegional()
		f := NewFaultyRegional(mem)
		f.SetWriteFault(func(store.CellKey) WriteFault { return tc.fault })
		k := store.CellKey{Workspace: "ws", Namespace: "ns", Identifier: "a", Duration: time.Minute, Sequence: 1}
		counts, err := f.Increment(ctx, []store.Increment{{Key: k, Delta: 1, TTL: time.Hour}})
		if failed := err != nil || counts[0] < 0; failed != tc.fails || mem.Count(k) != tc.applied {
			t.Errorf("fault %d, increment: %v, %v; store holds %d, want %d (fails %v)", tc.fault, counts, err, mem.Count(k), tc.applied, tc.fails)
		}
		k.Identifier = "slots"
		k.Sequence = store.PoolCellOf(0, 61_000)
		k.Duration = time.Duration(store.PoolCode(0, k.Sequence)) * time.Millisecond
		_, err = f.TakeSlots(ctx, store.SlotTake{Key: k, Cost: 1, Limit: 10, Now: 1000, TTL: time.Hour, Writer: "a", Total: 1})
		if (err != nil) != tc.fails || mem.Count(k) != tc.slotsApplied {
			t.Errorf("fault %d, slots: %v; store holds %d, want %d (fails %v)", tc.fault, err, mem.Count(k), tc.slotsApplied, tc.fails)
		}
	}
}

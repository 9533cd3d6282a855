// Package storetest is the contract suite of the reservations' ledgers:
// every store.Ledger runs TestLedger against the real thing.
package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/reservation"
	"github.com/unkeyed/ratelimit/services/reservation/store"
)

// TestLedger checks the contract every store.Ledger keeps: the first claim of an id
// wins and says so; every later one, however many race, loses and reads
// the first one's cost.
func TestLedger(t *testing.T, l store.Ledger) {
	ctx := context.Background()
	expires := time.Now().Add(time.Hour)
	id := reservation.NewID()
	first, cost, err := l.Claim(ctx, id, "ws", 700, expires)
	if err != nil || !first || cost != 700 {
		t.Fatalf("first claim: %v %d %v", first, cost, err)
	}
	first, cost, err = l.Claim(ctx, id, "ws", 900, expires)
	if err != nil || first || cost != 700 {
		t.Fatalf("second claim: first %v, cost %d, %v; want false, 700", first, cost, err)
	}
	race := reservation.NewID()
	var wins atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			first, _, err := l.Claim(ctx, race, "ws", int64(i), expires)
			if err != nil {
				t.Error(err)
			}
			if first {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d of 16 racing claims won, want 1", wins.Load())
	}
}

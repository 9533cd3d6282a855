package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/reservation"
	"github.com/unkeyed/ratelimit/services/reservation/memstore"
	"github.com/unkeyed/ratelimit/services/reservation/storetest"
)

// TestContract runs the contract suite, then the bounds of a process's
// memory: a workspace holds at most a tenth of the records, and expired
// ones make room.
func TestContract(t *testing.T) {
	storetest.TestLedger(t, memstore.New(100, time.Now))
	now := time.Now()
	clock := func() time.Time { return now }
	l := memstore.New(20, clock) // a workspace may hold 2
	ctx := context.Background()
	l.Claim(ctx, reservation.NewID(), "greedy", 1, now.Add(time.Second))
	l.Claim(ctx, reservation.NewID(), "greedy", 1, now.Add(time.Hour))
	if _, _, err := l.Claim(ctx, reservation.NewID(), "greedy", 1, now.Add(time.Hour)); !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("a workspace's claim past its share: %v, want ErrFull", err)
	}
	if first, _, err := l.Claim(ctx, reservation.NewID(), "other", 1, now.Add(time.Hour)); !first || err != nil {
		t.Fatalf("another workspace's claim while one is at its share: %v %v", first, err)
	}
	now = now.Add(2 * time.Second) // the first record expired: room for one
	if first, _, err := l.Claim(ctx, reservation.NewID(), "greedy", 1, now.Add(time.Hour)); !first || err != nil {
		t.Fatalf("a claim once a record expired: %v %v", first, err)
	}
}

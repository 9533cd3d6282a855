package store_test

import (
	"context"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// The regional store's contract on the in-memory store every store's
// contract suite is measured against: increments add, a floor re-seeds a
// cell that lost its count (max-merge, never a sum), and a cell no one
// wrote counts 0.
func ExampleRegional() {
	var s store.Regional = storetest.NewMemRegional()
	ctx := context.Background()
	cell := store.CellKey{Workspace: "acme", Namespace: "sms", Identifier: "user_42", Duration: time.Minute, Sequence: 30_000_000}
	counts, _ := s.Increment(ctx, []store.Increment{{Key: cell, Delta: 3, TTL: 2 * time.Minute}})
	fmt.Println("after 3:", counts[0])
	// A process that knows the cell held 10 re-seeds it: the count is
	// raised to the floor, not added to it.
	counts, _ = s.Increment(ctx, []store.Increment{{Key: cell, Delta: 1, Floor: 11, TTL: 2 * time.Minute}})
	fmt.Println("after a floor of 11:", counts[0])
	other := cell
	other.Identifier = "user_43"
	loaded, _ := s.Load(ctx, []store.CellKey{cell, other})
	fmt.Println("loaded:", loaded)
	// Output:
	// after 3: 3
	// after a floor of 11: 11
	// loaded: [11 0]
}

package store_test

import (
	"context"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/services/reservation"
	"github.com/unkeyed/ratelimit/services/reservation/memstore"
	"github.com/unkeyed/ratelimit/services/reservation/store"
)

// The ledger's contract on the one of a single process: a reservation
// settles once; a second settle learns the cost of the first.
func ExampleLedger() {
	var l store.Ledger = memstore.New(memstore.DefaultRecords, time.Now)
	ctx := context.Background()
	id := reservation.NewID()
	first, cost, _ := l.Claim(ctx, id, "acme", 640, time.Now().Add(time.Hour))
	fmt.Println(first, cost)
	first, cost, _ = l.Claim(ctx, id, "acme", 900, time.Now().Add(time.Hour))
	fmt.Println(first, cost)
	// Output:
	// true 640
	// false 640
}

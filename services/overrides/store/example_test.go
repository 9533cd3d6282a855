package store_test

import (
	"context"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/services/overrides/memstore"
	"github.com/unkeyed/ratelimit/services/overrides/store"
)

// The overrides' store contract on the store of a process without MySQL:
// a set and a delete are changes with growing revisions, and a poll of the
// changes since a revision sees the delete as a tombstone, so that every
// process's registry lets the override go.
func ExampleOverrides() {
	var s store.Overrides = memstore.New()
	ctx := context.Background()
	set, _ := s.Set(ctx, store.Override{ID: "ovr_1", Workspace: "acme", Namespace: "api", Identifier: "vip", Limit: 1000, Duration: time.Minute})
	del, _ := s.Delete(ctx, "acme", "api", "vip")
	fmt.Println("revisions grow:", del.Revision > set.Revision)
	changes, _ := s.Changes(ctx, del.Revision)
	fmt.Println(changes[0].Identifier, "deleted:", changes[0].Deleted)
	_, err := s.Get(ctx, "acme", "api", "vip")
	fmt.Println(err == store.ErrNotFound)
	// Output:
	// revisions grow: true
	// vip deleted: true
	// true
}

package store_test

import (
	"context"
	"fmt"

	"github.com/unkeyed/ratelimit/services/audit"
	"github.com/unkeyed/ratelimit/services/audit/memstore"
	"github.com/unkeyed/ratelimit/services/audit/store"
)

// The audit log's contract on the store of a process without MySQL: each
// entry is stamped when recorded, and a workspace's entries come back
// newest first, filtered and paged by ID.
func ExampleLog() {
	var log store.Log = memstore.New(memstore.DefaultEntries)
	ctx := context.Background()
	for _, target := range []string{"api/alice", "api/bob", "api/carol"} {
		log.Record(ctx, store.Entry{Workspace: "acme", Actor: "key_1", Action: audit.OverrideCreate, Target: target})
	}
	log.Record(ctx, store.Entry{Workspace: "acme", Actor: "key_1", Action: audit.KeyRevoke, Target: "key_2"})
	page, _ := log.List(ctx, "acme", store.Filter{Action: audit.OverrideCreate}, 0, 2)
	for _, e := range page {
		fmt.Println(e.ID, e.Action, e.Target)
	}
	more, _ := log.List(ctx, "acme", store.Filter{Action: audit.OverrideCreate}, page[len(page)-1].ID, 2)
	fmt.Println("then", more[0].ID, more[0].Target)
	// Output:
	// 3 override.create api/carol
	// 2 override.create api/bob
	// then 1 api/alice
}

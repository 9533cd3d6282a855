package store_test

import (
	"context"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/services/analytics/memstore"
	"github.com/unkeyed/ratelimit/services/analytics/store"
)

// The analytics' store contract on a process's memory: what two processes
// add to one minute adds up, and the identifiers come back the most denied
// first.
func ExampleStore() {
	var s store.Store = memstore.New(memstore.DefaultRows, time.Now)
	ctx := context.Background()
	minute := time.Now().Truncate(time.Minute).Add(-time.Minute)
	b := func(passed, denied int64) store.Bucket {
		return store.Bucket{Workspace: "acme", Namespace: "api", Start: minute, Passed: passed, Denied: denied}
	}
	s.Add(ctx, "process-a-1", []store.Bucket{b(10, 2)}, []store.Entry{{Bucket: b(3, 2), Identifier: "alice"}, {Bucket: b(7, 0), Identifier: "bob"}})
	s.Add(ctx, "process-b-1", []store.Bucket{b(5, 1)}, []store.Entry{{Bucket: b(0, 1), Identifier: "alice"}})
	series, _ := s.Series(ctx, "acme", "api", store.Minute, minute, minute.Add(time.Minute))
	fmt.Println("passed", series[0].Passed, "denied", series[0].Denied)
	top, _ := s.Top(ctx, "acme", "api", minute, minute.Add(time.Minute), 10)
	for _, it := range top {
		fmt.Println(it.Identifier, it.Passed, it.Denied)
	}
	// Output:
	// passed 15 denied 3
	// alice 3 3
	// bob 7 0
}

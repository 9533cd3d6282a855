package overrides_test

import (
	"context"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/services/overrides"
)

// A registry in memory (a process without MySQL): an override set for an
// identifier, and one for a pattern, replace the limit of the requests they
// match; the exact one wins over the pattern.
func ExampleRegistry() {
	reg, err := overrides.New()
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, o := range []overrides.Override{
		{Workspace: "acme", Namespace: "api", Identifier: "customer_*", Limit: 100, Duration: time.Minute},
		{Workspace: "acme", Namespace: "api", Identifier: "customer_42", Limit: 1000, Duration: time.Minute},
	} {
		if _, err := reg.Set(ctx, o); err != nil {
			panic(err) // a limit or name that breaks a rule: *invalid.Error
		}
	}
	for _, id := range []string{"customer_42", "customer_7", "guest"} {
		if o, ok := reg.Lookup("acme", "api", id); ok {
			fmt.Println(id, "->", o.Limit, "per", o.Duration)
		} else {
			fmt.Println(id, "-> the request's own limit")
		}
	}
	// Output:
	// customer_42 -> 1000 per 1m0s
	// customer_7 -> 100 per 1m0s
	// guest -> the request's own limit
}

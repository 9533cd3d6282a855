package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// fixedClock is a clock that stands still, so that the examples' output
// does not depend on when they run.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// A limiter embedded in a program: in memory only, for one process. Give it
// stores (WithRegionalStore, WithGlobalStore) to share counts with the
// other processes of a region and with other regions, and run its loops
// with Run.
func ExampleNew() {
	limiter, err := ratelimit.New("eu-west", ratelimit.WithClock(fixedClock{time.UnixMilli(1_800_000_030_000)}))
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- limiter.Run(ctx) }() // replays and flushes, with stores
	defer func() { stop(); <-done }()

	// Two sign-up SMS per user a minute.
	req := ratelimit.Request{Workspace: "acme", Namespace: "sms.sign_up", Identifier: "user_42",
		Limit: 2, Duration: time.Minute, Cost: 1}
	for range 3 {
		resp, err := limiter.Limit(ctx, req)
		if err != nil {
			panic(err) // a request that breaks a rule: *invalid.Error
		}
		fmt.Println(resp.Success, resp.Remaining, resp.RetryAfter)
	}
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 30.001s
}

// A request path with rules of its own composes the limiter's checks,
// validates once, and then calls Decide, which checks nothing again: here
// identifiers of up to 512 characters, as Unkey's API takes them.
func ExampleService_Decide() {
	limiter, err := ratelimit.New("eu-west", ratelimit.WithClock(fixedClock{time.UnixMilli(1_800_000_030_000)}))
	if err != nil {
		panic(err)
	}
	validate := func(r ratelimit.Request) error {
		if err := ratelimit.CheckName("namespace", r.Namespace, ratelimit.MaxNameLength); err != nil {
			return err
		}
		if err := ratelimit.CheckName("identifier", r.Identifier, 512); err != nil {
			return err
		}
		if err := ratelimit.CheckLimit("limit", r.Limit, false); err != nil {
			return err
		}
		if err := ratelimit.CheckDuration("duration", r.Duration, ratelimit.MaxDuration); err != nil {
			return err
		}
		return ratelimit.CheckCost("cost", r.Cost)
	}
	bad := ratelimit.Request{Workspace: "acme", Namespace: "api", Identifier: "key_1", Limit: 100, Duration: time.Second / 2, Cost: 1}
	fmt.Println(validate(bad))

	ok := bad
	ok.Duration = time.Second
	if err := validate(ok); err != nil {
		panic(err)
	}
	resp, err := limiter.Decide(context.Background(), ok)
	fmt.Println(resp.Success, resp.Remaining, err)
	// Output:
	// duration: must be between 1000 and 2592000000 milliseconds
	// true 99 <nil>
}

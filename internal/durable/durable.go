// Package durable holds what the worker's Restate services share.
package durable

import (
	"math"
	"time"

	restate "github.com/restatedev/sdk-go"
)

// MaxRetryInterval is the longest a failed invocation of the worker's
// services waits before its next attempt: once the worker (or its
// database) is back, its schedules resume within this long.
const MaxRetryInterval = 10 * time.Second

// RetryForever is the invocation retry policy of the worker's services,
// given to restate-server when the worker registers: attempts at growing
// intervals up to MaxRetryInterval, as good as without end (2^31 of them,
// some 680 years at that interval), so that an invocation is never paused
// or killed for having run out of attempts. A schedule is a chain of
// invocations, each sending the next: restate-server's default budget (70
// attempts, about an hour) would pause the one in flight during a longer
// outage of the worker, and the chain would stop for good.
func RetryForever() restate.ServiceDefinitionOption {
	return restate.WithInvocationRetryPolicy(
		restate.WithInitialRetryInterval(100*time.Millisecond),
		restate.WithRetryIntervalFactor(2),
		restate.WithMaxRetryInterval(MaxRetryInterval),
		restate.WithMaxRetryAttempts(math.MaxInt32),
	)
}

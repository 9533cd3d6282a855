package pipeline

import (
	"context"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Tally adds n to a counter of the call's workspace, named identifier in
// namespace, and returns what it holds over the last window (a sliding
// window: the last full one weighed by how much of it still overlaps):
// what every process of the fleet added, as far as the limiter's stores
// have carried it. It is a counter the service keeps for itself (what the
// Envoys of a quota bucket asked for, fleet-wide), so no override applies
// to it, whatever pattern an operator set, and it is neither a decision
// in the metrics nor in the analytics. The call must be allowed to
// decide limits in namespace.
func (p *Pipeline) Tally(ctx context.Context, namespace, identifier string, n int64, window time.Duration) (int64, error) {
	if err := call.Authorize(ctx, access.Limit, namespace); err != nil {
		return 0, err
	}
	r := ratelimit.Request{Workspace: call.Workspace(ctx), Namespace: namespace, Identifier: identifier,
		Limit: ratelimit.MaxLimit, Duration: window, Cost: n, Report: true}
	if err := ratelimit.OperatorBounds.CheckRequest(&r); err != nil {
		return 0, err
	}
	r.Identifier = CounterIdentifier(r.Identifier)
	resp, err := p.limiter.Decide(ctx, r)
	if err != nil {
		return 0, err
	}
	return r.Limit - resp.Remaining, nil
}

// RecordDenied counts n denials of identifier in namespace, in the call's
// workspace, that a proxy decided itself and reported (Envoy's quota
// filter enforces its assignment and reports what it denied), in the
// analytics beside the service's own decisions.
func (p *Pipeline) RecordDenied(ctx context.Context, namespace, identifier string, n uint64) {
	if p.analytics != nil {
		p.analytics.RecordN(call.Workspace(ctx), namespace, CounterIdentifier(identifier), false, n)
	}
}

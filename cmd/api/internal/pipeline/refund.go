package pipeline

import (
	"context"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Refund gives c's cost back to its limit in the namespace, as
// ratelimit.Service.Refund does (the cell of now, no more than it holds;
// a concurrency limit's slots from the cells that end first; a token
// bucket's tokens up to its burst), after the override that applies to
// it, so that it reaches the window the cost was counted in. It answers
// what it gave back and the limit after it, as a check answers. A call
// that names another namespace is denied.
func (n Namespace) Refund(ctx context.Context, c Call) (Decision, int64, error) {
	if c.Request.Namespace != n.name {
		return Decision{}, 0, &access.DeniedError{Permission: access.Name(access.Limit, c.Request.Namespace)}
	}
	r := c.Request
	r.Workspace = call.Workspace(ctx)
	if r.Algorithm != ratelimit.Concurrency {
		var err error
		if r, err = c.validate(r.Workspace, false); err != nil { // a refund takes no penalty: it offends nobody
			return Decision{}, 0, err
		}
	} else {
		r.Identifier = CounterIdentifier(r.Identifier)
	}
	id, _ := n.p.override(&r, c.Request.Identifier) // a refund is no decision to shadow
	d := Decision{OverrideID: id}
	ret, err := n.p.limiter.Refund(ctx, r)
	if err != nil {
		return Decision{}, 0, err
	}
	resp, err := ret.After(ctx)
	if err != nil {
		return Decision{}, 0, err
	}
	d.Response = resp
	d.Duration = r.Window(resp.Reset)
	d.Quota, d.QuotaWindow = r.Policy(resp.Reset)
	return d, ret.Given, nil
}

package pipeline

import (
	"context"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
)

// authorizeAll is call.Authorize for every call of a batch, before any is
// decided: a batch needs the permission of every namespace it names.
func authorizeAll(ctx context.Context, calls []Call) error {
	perms := call.PrincipalOf(ctx).Permissions
	for i := range calls {
		if ns := calls[i].Request.Namespace; !perms.Allows(access.Limit, ns) {
			return &access.DeniedError{Permission: access.Name(access.Limit, ns)}
		}
	}
	return nil
}

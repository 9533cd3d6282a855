package pipeline

import (
	"context"
	"errors"
	"strings"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/reservation"
)

// tokenWords is what a caller is told of a token of one kind.
type tokenWords struct {
	// action is what its ledger records once, verb what the caller does
	// with it.
	action, verb string
	// invalid answers a token this service did not issue, one that was
	// changed, one of the other kind and one of another workspace alike:
	// a caller learns nothing of which.
	invalid *invalid.Error
}

// words holds each kind's. A lease settles as no reservation (its refund
// would land in a window, not in its slots), nor a reservation releases
// as a lease.
var words = [...]tokenWords{
	reservation.KindReservation: {action: "settlement", verb: "settle",
		invalid: &invalid.Error{Field: "reservation", Rule: "must be a reservation this service issued to this workspace, unchanged"}},
	reservation.KindLease: {action: "release", verb: "release",
		invalid: &invalid.Error{Field: "lease_id", Rule: "must be a lease this service issued to this workspace, unchanged"}},
}

// open verifies id, a token of kind issued to the caller's workspace,
// and returns what it names, if the caller may decide limits in its
// namespace; or, when namespace is not "", if it is a token of that
// namespace, which the caller was authorized for. Reservations and leases
// are opened here alone: one codec (package reservation) signs both, the
// kind signed with the rest.
func (p *Pipeline) open(ctx context.Context, id string, kind reservation.Kind, namespace string) (reservation.Token, error) {
	w := &words[kind]
	t, err := p.keyring.Open(ctx, id)
	if errors.Is(err, reservation.ErrSecretUnavailable) {
		return t, reservation.ErrUnavailable
	}
	if err != nil || t.Kind != kind || t.Workspace != call.Workspace(ctx) || namespace != "" && t.Namespace != namespace {
		return t, w.invalid
	}
	if t.Scope != p.scope {
		return t, &invalid.Error{Field: w.invalid.Field, Rule: "issued where this process cannot record its " + w.action +
			" (" + scopeName(t.Scope) + "): " + w.verb + " it there, or give the processes MySQL, which every region shares"}
	}
	if namespace == "" {
		if err := call.Authorize(ctx, access.Limit, t.Namespace); err != nil {
			return t, err
		}
	}
	annotate(ctx, t.Namespace, 1)
	return t, nil
}

// scopeName words a ledger scope for a caller.
func scopeName(scope string) string {
	switch {
	case scope == "":
		return "every region"
	case strings.HasPrefix(scope, "region:"):
		return "region " + strings.TrimPrefix(scope, "region:")
	}
	return "another process, without Redis or MySQL"
}

package connectapi

import (
	"context"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Acquire implements RatelimitService.Acquire.
func (h *Handler) Acquire(ctx context.Context, req *connect.Request[ratelimitv1.AcquireRequest]) (*connect.Response[ratelimitv1.AcquireResponse], error) {
	m := req.Msg
	cost := int64(1)
	if m.Cost != nil {
		cost = *m.Cost
	}
	l, err := h.pipeline.Acquire(ctx, ratelimit.Acquisition{Namespace: m.GetNamespace(), Identifier: m.GetIdentifier(),
		Limit: m.GetLimit(), Lease: pipeline.Seconds(m.GetLease()), Cost: cost})
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceAcquireProcedure, err)
	}
	return connect.NewResponse(leaseAnswer(l)), nil
}

// Release implements RatelimitService.Release.
func (h *Handler) Release(ctx context.Context, req *connect.Request[ratelimitv1.ReleaseRequest]) (*connect.Response[ratelimitv1.ReleaseResponse], error) {
	r, err := h.pipeline.Release(ctx, req.Msg.GetLeaseId())
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceReleaseProcedure, err)
	}
	return connect.NewResponse(&ratelimitv1.ReleaseResponse{Released: r.Freed > 0, InFlight: r.InFlight, Limit: r.Limit}), nil
}

// Extend implements RatelimitService.Extend.
func (h *Handler) Extend(ctx context.Context, req *connect.Request[ratelimitv1.ExtendRequest]) (*connect.Response[ratelimitv1.ExtendResponse], error) {
	l, err := h.pipeline.Extend(ctx, req.Msg.GetLeaseId(), pipeline.Seconds(req.Msg.GetLease()))
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceExtendProcedure, err)
	}
	a := leaseAnswer(l)
	return connect.NewResponse(&ratelimitv1.ExtendResponse{Success: a.Success, LeaseId: a.LeaseId, InFlight: a.InFlight,
		Limit: a.Limit, RetryAfter: a.RetryAfter, ExpiresAt: a.ExpiresAt}), nil
}

// leaseAnswer is the wire answer of a lease.
func leaseAnswer(l pipeline.Lease) *ratelimitv1.AcquireResponse {
	out := &ratelimitv1.AcquireResponse{Success: l.Success, LeaseId: l.ID, InFlight: l.InFlight, Limit: l.Limit,
		RetryAfter: l.RetryAfter.Milliseconds()}
	if !l.ExpiresAt.IsZero() {
		out.ExpiresAt = l.ExpiresAt.UnixMilli()
	}
	return out
}

package connectapi

import (
	"context"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
)

// GetPenalty implements RatelimitService.GetPenalty.
func (h *Handler) GetPenalty(ctx context.Context, req *connect.Request[ratelimitv1.GetPenaltyRequest]) (*connect.Response[ratelimitv1.GetPenaltyResponse], error) {
	b, err := h.pipeline.GetPenalty(ctx, req.Msg.Namespace, req.Msg.Identifier)
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceGetPenaltyProcedure, err)
	}
	return connect.NewResponse(&ratelimitv1.GetPenaltyResponse{Penalty: toPenalty(b)}), nil
}

// ListPenalties implements RatelimitService.ListPenalties.
func (h *Handler) ListPenalties(ctx context.Context, req *connect.Request[ratelimitv1.ListPenaltiesRequest]) (*connect.Response[ratelimitv1.ListPenaltiesResponse], error) {
	page, err := h.pipeline.ListPenalties(ctx, req.Msg.Namespace, req.Msg.After, int(req.Msg.Limit))
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceListPenaltiesProcedure, err)
	}
	out := &ratelimitv1.ListPenaltiesResponse{Penalties: make([]*ratelimitv1.Penalty, len(page))}
	for i, b := range page {
		out.Penalties[i] = toPenalty(b)
	}
	return connect.NewResponse(out), nil
}

// DeletePenalty implements RatelimitService.DeletePenalty.
func (h *Handler) DeletePenalty(ctx context.Context, req *connect.Request[ratelimitv1.DeletePenaltyRequest]) (*connect.Response[ratelimitv1.DeletePenaltyResponse], error) {
	resp := connect.NewResponse(&ratelimitv1.DeletePenaltyResponse{})
	ctx = withRequestID(ctx, resp, transport.NewRequestID())
	if err := h.pipeline.DeletePenalty(ctx, req.Msg.Namespace, req.Msg.Identifier); err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceDeletePenaltyProcedure, err)
	}
	return resp, nil
}

// toPenalty converts a block to the API's message.
func toPenalty(b pipeline.Penalty) *ratelimitv1.Penalty {
	return &ratelimitv1.Penalty{Namespace: b.Namespace, Identifier: b.Identifier, Start: b.Start, Until: b.Until}
}

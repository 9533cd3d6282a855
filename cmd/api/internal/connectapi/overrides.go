package connectapi

import (
	"context"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/services/overrides"
)

// SetOverride implements RatelimitService.SetOverride.
func (h *Handler) SetOverride(ctx context.Context, req *connect.Request[ratelimitv1.SetOverrideRequest]) (*connect.Response[ratelimitv1.SetOverrideResponse], error) {
	m := req.Msg
	resp := connect.NewResponse(&ratelimitv1.SetOverrideResponse{})
	ctx = withRequestID(ctx, resp, transport.NewRequestID())
	o, err := h.pipeline.SetOverride(ctx, overrides.Override{Namespace: m.Namespace,
		Identifier: m.Identifier, Limit: m.Limit, Duration: pipeline.Milliseconds(m.Duration), Burst: m.Burst, Shadow: m.Shadow})
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceSetOverrideProcedure, err)
	}
	resp.Msg.Override = toOverride(o)
	return resp, nil
}

// GetOverride implements RatelimitService.GetOverride.
func (h *Handler) GetOverride(ctx context.Context, req *connect.Request[ratelimitv1.GetOverrideRequest]) (*connect.Response[ratelimitv1.GetOverrideResponse], error) {
	o, err := h.pipeline.GetOverride(ctx, req.Msg.Namespace, req.Msg.Identifier)
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceGetOverrideProcedure, err)
	}
	return connect.NewResponse(&ratelimitv1.GetOverrideResponse{Override: toOverride(o)}), nil
}

// ListOverrides implements RatelimitService.ListOverrides.
func (h *Handler) ListOverrides(ctx context.Context, req *connect.Request[ratelimitv1.ListOverridesRequest]) (*connect.Response[ratelimitv1.ListOverridesResponse], error) {
	page, next, err := h.pipeline.ListOverrides(ctx, req.Msg.Namespace, req.Msg.Cursor, int(req.Msg.Limit))
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceListOverridesProcedure, err)
	}
	out := &ratelimitv1.ListOverridesResponse{Overrides: make([]*ratelimitv1.Override, len(page)), Cursor: next}
	for i, o := range page {
		out.Overrides[i] = toOverride(o)
	}
	return connect.NewResponse(out), nil
}

// DeleteOverride implements RatelimitService.DeleteOverride.
func (h *Handler) DeleteOverride(ctx context.Context, req *connect.Request[ratelimitv1.DeleteOverrideRequest]) (*connect.Response[ratelimitv1.DeleteOverrideResponse], error) {
	resp := connect.NewResponse(&ratelimitv1.DeleteOverrideResponse{})
	ctx = withRequestID(ctx, resp, transport.NewRequestID())
	if err := h.pipeline.DeleteOverride(ctx, req.Msg.Namespace, req.Msg.Identifier); err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceDeleteOverrideProcedure, err)
	}
	return resp, nil
}

func toOverride(o overrides.Override) *ratelimitv1.Override {
	return &ratelimitv1.Override{Id: o.ID, Namespace: o.Namespace, Identifier: o.Identifier,
		Limit: o.Limit, Duration: o.Duration.Milliseconds(), Burst: o.Burst, Shadow: o.Shadow}
}

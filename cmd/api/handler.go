package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// handler serves RatelimitService on top of a limiter.
type handler struct {
	limiter *ratelimit.Service
	metrics *apiMetrics
}

var _ ratelimitv1connect.RatelimitServiceHandler = (*handler)(nil)

// Limit implements RatelimitService.Limit.
func (h *handler) Limit(ctx context.Context, req *connect.Request[ratelimitv1.LimitRequest]) (*connect.Response[ratelimitv1.LimitResponse], error) {
	resp, err := h.limiter.Limit(ctx, toRequest(workspaceFrom(ctx), req.Msg))
	if err != nil {
		return nil, toConnectError(err)
	}
	h.metrics.decision("Limit", resp.Success)
	return connect.NewResponse(&ratelimitv1.LimitResponse{
		Success:    resp.Success,
		Limit:      resp.Limit,
		Remaining:  resp.Remaining,
		Reset_:     resp.Reset.UnixMilli(),
		RetryAfter: resp.RetryAfter.Milliseconds(),
	}), nil
}

// MultiLimit implements RatelimitService.MultiLimit.
func (h *handler) MultiLimit(ctx context.Context, req *connect.Request[ratelimitv1.MultiLimitRequest]) (*connect.Response[ratelimitv1.MultiLimitResponse], error) {
	ws := workspaceFrom(ctx)
	reqs := make([]ratelimit.Request, len(req.Msg.Limits))
	for i, l := range req.Msg.Limits {
		reqs[i] = toRequest(ws, l)
	}
	resp, err := h.limiter.MultiLimit(ctx, reqs)
	if err != nil {
		return nil, toConnectError(err)
	}
	h.metrics.decision("MultiLimit", resp.Passed)
	out := &ratelimitv1.MultiLimitResponse{
		Passed:  resp.Passed,
		Results: make([]*ratelimitv1.MultiLimitResult, len(resp.Results)),
	}
	for i, r := range resp.Results {
		out.Results[i] = &ratelimitv1.MultiLimitResult{
			Namespace:  reqs[i].Namespace,
			Identifier: reqs[i].Identifier,
			Success:    r.Success,
			Limit:      r.Limit,
			Remaining:  r.Remaining,
			Reset_:     r.Reset.UnixMilli(),
			RetryAfter: r.RetryAfter.Milliseconds(),
		}
	}
	return connect.NewResponse(out), nil
}

// toRequest converts an API request. An absent cost means 1. A duration
// outside the valid range stays outside it (the conversion saturates instead
// of overflowing), so validation reports it.
func toRequest(workspace string, m *ratelimitv1.LimitRequest) ratelimit.Request {
	cost := int64(1)
	if m.Cost != nil {
		cost = *m.Cost
	}
	ms := min(max(m.GetDuration(), -1), ratelimit.MaxDuration.Milliseconds()+1)
	return ratelimit.Request{
		Workspace:  workspace,
		Namespace:  m.GetNamespace(),
		Identifier: m.GetIdentifier(),
		Limit:      m.GetLimit(),
		Duration:   time.Duration(ms) * time.Millisecond,
		Cost:       cost,
	}
}

// toConnectError maps the limiter's errors to Connect codes: a validation
// error is invalid_argument with the field and rule as its message, a
// workspace at its window cap resource_exhausted naming the cap.
func toConnectError(err error) error {
	var ve *ratelimit.ValidationError
	if errors.As(err, &ve) {
		return connect.NewError(connect.CodeInvalidArgument, ve)
	}
	var ce *ratelimit.CapacityError
	if errors.As(err, &ce) {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"too many active windows: this workspace holds %d, the most UNKEY_MAX_WINDOWS_PER_WORKSPACE allows; "+
				"a window is freed once no request has used it for two of its durations", ce.Max))
	}
	return connect.NewError(connect.CodeInternal, err)
}

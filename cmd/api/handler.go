package main

import (
	"context"
	"encoding/base64"
	"errors"
	"time"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// handler is the Connect adapter: it translates RatelimitService's
// messages to the pipeline's calls and its decisions back.
type handler struct {
	pipeline *pipeline.Pipeline
}

var _ ratelimitv1connect.RatelimitServiceHandler = (*handler)(nil)

// Limit implements RatelimitService.Limit.
func (h *handler) Limit(ctx context.Context, req *connect.Request[ratelimitv1.LimitRequest]) (*connect.Response[ratelimitv1.LimitResponse], error) {
	d, err := h.pipeline.Limit(ctx, pipeline.Call{Request: toRequest(pipeline.Workspace(ctx), req.Msg)})
	if err != nil {
		return nil, toConnectError(err)
	}
	return connect.NewResponse(&ratelimitv1.LimitResponse{
		Success:    d.Success,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		Reset_:     d.Reset.UnixMilli(),
		RetryAfter: d.RetryAfter.Milliseconds(),
		OverrideId: d.OverrideID,
	}), nil
}

// calls converts the requests of a batch.
func calls(workspace string, limits []*ratelimitv1.LimitRequest) []pipeline.Call {
	out := make([]pipeline.Call, len(limits))
	for i, l := range limits {
		out[i] = pipeline.Call{Request: toRequest(workspace, l)}
	}
	return out
}

// MultiLimit implements RatelimitService.MultiLimit.
func (h *handler) MultiLimit(ctx context.Context, req *connect.Request[ratelimitv1.MultiLimitRequest]) (*connect.Response[ratelimitv1.MultiLimitResponse], error) {
	ws := pipeline.Workspace(ctx)
	m, err := h.pipeline.Multi(ctx, ws, calls(ws, req.Msg.Limits))
	if err != nil {
		return nil, toConnectError(err)
	}
	out := &ratelimitv1.MultiLimitResponse{Passed: m.Passed, Results: make([]*ratelimitv1.MultiLimitResult, len(m.Results))}
	for i, d := range m.Results {
		out.Results[i] = multiResult(req.Msg.Limits[i], d)
	}
	return connect.NewResponse(out), nil
}

// multiResult answers one entry of a batch, repeating its key as sent.
func multiResult(l *ratelimitv1.LimitRequest, d pipeline.Decision) *ratelimitv1.MultiLimitResult {
	return &ratelimitv1.MultiLimitResult{
		Namespace:  l.GetNamespace(),
		Identifier: l.GetIdentifier(),
		Success:    d.Success,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		Reset_:     d.Reset.UnixMilli(),
		RetryAfter: d.RetryAfter.Milliseconds(),
		OverrideId: d.OverrideID,
	}
}

// BatchLimit implements RatelimitService.BatchLimit: each request is decided
// and counted on its own, as a Limit call would be, in one round trip (see
// pipeline.Batch).
func (h *handler) BatchLimit(ctx context.Context, req *connect.Request[ratelimitv1.BatchLimitRequest]) (*connect.Response[ratelimitv1.BatchLimitResponse], error) {
	ws := pipeline.Workspace(ctx)
	ds, err := h.pipeline.Batch(ctx, ws, calls(ws, req.Msg.Limits))
	if err != nil {
		return nil, toConnectError(err)
	}
	out := &ratelimitv1.BatchLimitResponse{Results: make([]*ratelimitv1.MultiLimitResult, len(ds))}
	for i, d := range ds {
		out.Results[i] = multiResult(req.Msg.Limits[i], d)
	}
	return connect.NewResponse(out), nil
}

// SetOverride implements RatelimitService.SetOverride.
func (h *handler) SetOverride(ctx context.Context, req *connect.Request[ratelimitv1.SetOverrideRequest]) (*connect.Response[ratelimitv1.SetOverrideResponse], error) {
	m := req.Msg
	o, err := h.pipeline.Overrides().Set(ctx, overrides.Override{Workspace: pipeline.Workspace(ctx), Namespace: m.Namespace,
		Identifier: m.Identifier, Limit: m.Limit, Duration: durationMs(m.Duration)})
	if err != nil {
		return nil, toConnectError(err)
	}
	return connect.NewResponse(&ratelimitv1.SetOverrideResponse{Override: toOverride(o)}), nil
}

// GetOverride implements RatelimitService.GetOverride.
func (h *handler) GetOverride(ctx context.Context, req *connect.Request[ratelimitv1.GetOverrideRequest]) (*connect.Response[ratelimitv1.GetOverrideResponse], error) {
	o, err := h.pipeline.Overrides().Get(ctx, pipeline.Workspace(ctx), req.Msg.Namespace, req.Msg.Identifier)
	if err != nil {
		return nil, toConnectError(err)
	}
	return connect.NewResponse(&ratelimitv1.GetOverrideResponse{Override: toOverride(o)}), nil
}

// ListOverrides implements RatelimitService.ListOverrides. The cursor is
// the last identifier of the previous page, base64-encoded so that clients
// treat it as opaque.
func (h *handler) ListOverrides(ctx context.Context, req *connect.Request[ratelimitv1.ListOverridesRequest]) (*connect.Response[ratelimitv1.ListOverridesResponse], error) {
	after, err := decodeCursor(req.Msg.Cursor)
	if err != nil {
		return nil, toConnectError(err)
	}
	page, more, err := h.pipeline.Overrides().List(ctx, pipeline.Workspace(ctx), req.Msg.Namespace, after, int(req.Msg.Limit))
	if err != nil {
		return nil, toConnectError(err)
	}
	out := &ratelimitv1.ListOverridesResponse{Overrides: make([]*ratelimitv1.Override, len(page))}
	for i, o := range page {
		out.Overrides[i] = toOverride(o)
	}
	if more {
		out.Cursor = encodeCursor(page[len(page)-1].Identifier)
	}
	return connect.NewResponse(out), nil
}

// DeleteOverride implements RatelimitService.DeleteOverride.
func (h *handler) DeleteOverride(ctx context.Context, req *connect.Request[ratelimitv1.DeleteOverrideRequest]) (*connect.Response[ratelimitv1.DeleteOverrideResponse], error) {
	if err := h.pipeline.Overrides().Delete(ctx, pipeline.Workspace(ctx), req.Msg.Namespace, req.Msg.Identifier); err != nil {
		return nil, toConnectError(err)
	}
	return connect.NewResponse(&ratelimitv1.DeleteOverrideResponse{}), nil
}

func toOverride(o overrides.Override) *ratelimitv1.Override {
	return &ratelimitv1.Override{Id: o.ID, Namespace: o.Namespace, Identifier: o.Identifier,
		Limit: o.Limit, Duration: o.Duration.Milliseconds()}
}

// encodeCursor and decodeCursor turn the last identifier of a page into an
// opaque cursor and back.
func encodeCursor(identifier string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(identifier))
}

func decodeCursor(cursor string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return "", &ratelimit.ValidationError{Field: "cursor", Rule: "must be a cursor from a previous page"}
	}
	return string(b), nil
}

// toRequest converts an API request. An absent cost means 1.
func toRequest(workspace string, m *ratelimitv1.LimitRequest) ratelimit.Request {
	cost := int64(1)
	if m != nil && m.Cost != nil {
		cost = *m.Cost
	}
	return ratelimit.Request{
		Workspace:  workspace,
		Namespace:  m.GetNamespace(),
		Identifier: m.GetIdentifier(),
		Limit:      m.GetLimit(),
		Duration:   durationMs(m.GetDuration()),
		Cost:       cost,
	}
}

// durationMs converts a duration in ms from the API. One outside the valid
// range stays outside it (the conversion saturates instead of overflowing),
// so validation reports it.
func durationMs(ms int64) time.Duration {
	ms = min(max(ms, -1), ratelimit.MaxDuration.Milliseconds()+1)
	return time.Duration(ms) * time.Millisecond
}

// toConnectError answers an error of the pipeline as a Connect error of
// the code its kind maps to (gRPC's codes are the same numbers). An
// internal error keeps its cause, which opaqueError keeps from the client.
func toConnectError(err error) error {
	f := pipeline.Classify(err)
	code := connect.CodeInternal
	switch f.Kind {
	case pipeline.KindInvalidArgument:
		code = connect.CodeInvalidArgument
	case pipeline.KindUnauthenticated:
		code = connect.CodeUnauthenticated
	case pipeline.KindNotFound:
		code = connect.CodeNotFound
	case pipeline.KindResourceExhausted:
		code = connect.CodeResourceExhausted
	case pipeline.KindCanceled:
		code = connect.CodeCanceled
	case pipeline.KindDeadlineExceeded:
		code = connect.CodeDeadlineExceeded
	default:
		return connect.NewError(code, err)
	}
	return connect.NewError(code, errors.New(f.Message))
}

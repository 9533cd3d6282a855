package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// handler serves RatelimitService on top of a limiter and its overrides.
type handler struct {
	limiter   *ratelimit.Service
	overrides *overrides.Service
	metrics   *apiMetrics
	batches   *batchGate // nil: batches are not gated (benchmarks)
}

// enterBatch waits for the workspace's turn to decide a batch of n entries
// (see batchGate) and returns the function that ends it.
func (h *handler) enterBatch(ctx context.Context, workspace string, n int) (func(), error) {
	if h.batches == nil {
		return func() {}, nil
	}
	return h.batches.enter(ctx, workspace, n)
}

var _ ratelimitv1connect.RatelimitServiceHandler = (*handler)(nil)

// Limit implements RatelimitService.Limit.
func (h *handler) Limit(ctx context.Context, req *connect.Request[ratelimitv1.LimitRequest]) (*connect.Response[ratelimitv1.LimitResponse], error) {
	r := toRequest(workspaceFrom(ctx), req.Msg)
	// Validated before an override replaces the limit and duration, so that
	// a caller's bad values are refused whether or not one applies.
	if err := r.Validate(); err != nil {
		return nil, toConnectError(err)
	}
	overrideID := h.override(&r)
	r.Identifier = counterIdentifier(r.Identifier)
	resp, err := decide(ctx, h.limiter, &r)
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
		OverrideId: overrideID,
	}), nil
}

// MultiLimit implements RatelimitService.MultiLimit.
func (h *handler) MultiLimit(ctx context.Context, req *connect.Request[ratelimitv1.MultiLimitRequest]) (*connect.Response[ratelimitv1.MultiLimitResponse], error) {
	ws := workspaceFrom(ctx)
	reqs := make([]ratelimit.Request, len(req.Msg.Limits))
	for i, l := range req.Msg.Limits {
		reqs[i] = toRequest(ws, l)
	}
	if err := ratelimit.ValidateBatch(reqs); err != nil {
		return nil, toConnectError(err)
	}
	leave, err := h.enterBatch(ctx, ws, len(reqs))
	if err != nil {
		return nil, err
	}
	defer leave()
	overrideIDs := make([]string, len(reqs))
	blocked := make([]bool, len(reqs))
	for i := range reqs {
		overrideIDs[i] = h.override(&reqs[i])
		blocked[i] = reqs[i].Limit == 0
		reqs[i].Identifier = counterIdentifier(reqs[i].Identifier)
	}
	resp, err := multiLimit(ctx, h.limiter, reqs, blocked)
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
			Identifier: req.Msg.Limits[i].GetIdentifier(),
			Success:    r.Success,
			Limit:      r.Limit,
			Remaining:  r.Remaining,
			Reset_:     r.Reset.UnixMilli(),
			RetryAfter: r.RetryAfter.Milliseconds(),
			OverrideId: overrideIDs[i],
		}
	}
	return connect.NewResponse(out), nil
}

// maxBatchLimit is the most requests one BatchLimit call may hold: a
// thousand decisions take about 0.2 ms of CPU, and the message stays far
// under the 1 MiB cap (a thousand requests with 255-character names take
// about 520 KiB).
const maxBatchLimit = 1000

// BatchLimit implements RatelimitService.BatchLimit: each request is decided
// and counted on its own, as a Limit call would be, in one round trip. A
// request that breaks a rule fails the whole call before anything is
// counted; one that would take its workspace past the window cap is denied.
// The call waits for its workspace's turn (batchGate) and stops between
// entries once its context ends; the entries decided by then stay counted.
func (h *handler) BatchLimit(ctx context.Context, req *connect.Request[ratelimitv1.BatchLimitRequest]) (*connect.Response[ratelimitv1.BatchLimitResponse], error) {
	ws := workspaceFrom(ctx)
	reqs := make([]ratelimit.Request, len(req.Msg.Limits))
	for i, l := range req.Msg.Limits {
		reqs[i] = toRequest(ws, l)
	}
	if err := ratelimit.ValidateEach(reqs, maxBatchLimit); err != nil {
		return nil, toConnectError(err)
	}
	leave, err := h.enterBatch(ctx, ws, len(reqs))
	if err != nil {
		return nil, err
	}
	defer leave()
	out := &ratelimitv1.BatchLimitResponse{Results: make([]*ratelimitv1.MultiLimitResult, len(reqs))}
	for i := range reqs {
		if err := ctx.Err(); err != nil {
			// The client is gone or out of time: the rest would be wasted.
			code := connect.CodeCanceled
			if errors.Is(err, context.DeadlineExceeded) {
				code = connect.CodeDeadlineExceeded
			}
			return nil, connect.NewError(code, fmt.Errorf("stopped after %d of %d limits: %w", i, len(reqs), err))
		}
		r := &reqs[i]
		result := &ratelimitv1.MultiLimitResult{Namespace: r.Namespace, Identifier: r.Identifier, OverrideId: h.override(r), Limit: r.Limit}
		r.Identifier = counterIdentifier(r.Identifier)
		resp, err := decide(ctx, h.limiter, r)
		if err == nil {
			result.Success, result.Limit, result.Remaining = resp.Success, resp.Limit, resp.Remaining
			result.RetryAfter = resp.RetryAfter.Milliseconds()
		}
		// Denied at the window cap, the entry still has the reset of its
		// window.
		result.Reset_ = resp.Reset.UnixMilli()
		h.metrics.decision("Limit", result.Success)
		out.Results[i] = result
	}
	return connect.NewResponse(out), nil
}

// decide decides one request after its override was applied: blocked by an
// override with limit 0, or by the limiter. On an error the response still
// carries the reset of the request's window.
func decide(ctx context.Context, limiter *ratelimit.Service, r *ratelimit.Request) (ratelimit.Response, error) {
	if r.Limit == 0 {
		return blockedResponse(r.Duration, time.Now()), nil
	}
	resp, err := limiter.Limit(ctx, *r)
	if err != nil {
		return ratelimit.Response{Limit: r.Limit, Reset: windowEnd(r.Duration, time.Now())}, err
	}
	return resp, nil
}

// override replaces r's limit and duration by those of the override that
// applies to it, if any, and returns that override's id ("" if none).
func (h *handler) override(r *ratelimit.Request) string {
	o, ok := h.overrides.Lookup(r.Workspace, r.Namespace, r.Identifier)
	if !ok {
		return ""
	}
	r.Limit, r.Duration = o.Limit, o.Duration
	return o.ID
}

// SetOverride implements RatelimitService.SetOverride.
func (h *handler) SetOverride(ctx context.Context, req *connect.Request[ratelimitv1.SetOverrideRequest]) (*connect.Response[ratelimitv1.SetOverrideResponse], error) {
	m := req.Msg
	o, err := h.overrides.Set(ctx, overrides.Override{Workspace: workspaceFrom(ctx), Namespace: m.Namespace,
		Identifier: m.Identifier, Limit: m.Limit, Duration: durationMs(m.Duration)})
	if err != nil {
		return nil, toConnectError(err)
	}
	return connect.NewResponse(&ratelimitv1.SetOverrideResponse{Override: toOverride(o)}), nil
}

// GetOverride implements RatelimitService.GetOverride.
func (h *handler) GetOverride(ctx context.Context, req *connect.Request[ratelimitv1.GetOverrideRequest]) (*connect.Response[ratelimitv1.GetOverrideResponse], error) {
	o, err := h.overrides.Get(ctx, workspaceFrom(ctx), req.Msg.Namespace, req.Msg.Identifier)
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
	page, more, err := h.overrides.List(ctx, workspaceFrom(ctx), req.Msg.Namespace, after, int(req.Msg.Limit))
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
	if err := h.overrides.Delete(ctx, workspaceFrom(ctx), req.Msg.Namespace, req.Msg.Identifier); err != nil {
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

// toConnectError maps the limiter's and the overrides' errors to Connect
// codes: a validation error is invalid_argument with the field and rule as
// its message, a request refused by a cap resource_exhausted naming the cap
// (exhaustedMessage), a missing override not_found; anything else is
// internal, which opaqueError keeps from the client.
func toConnectError(err error) error {
	var ve *ratelimit.ValidationError
	if errors.As(err, &ve) {
		return connect.NewError(connect.CodeInvalidArgument, ve)
	}
	if errors.Is(err, overrides.ErrNotFound) {
		return connect.NewError(connect.CodeNotFound, errors.New("override not found: no override is set for this namespace and identifier"))
	}
	if msg, ok := exhaustedMessage(err); ok {
		return connect.NewError(connect.CodeResourceExhausted, errors.New(msg))
	}
	return connect.NewError(connect.CodeInternal, err)
}

package unkeyv2

import (
	"context"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/services/overrides"
)

// setOverrideRequest is V2RatelimitSetOverrideRequestBody.
type setOverrideRequest struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Duration   int64  `json:"duration"`
}

// overrideKey is the body of getOverride and deleteOverride.
type overrideKey struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
}

// override is RatelimitOverride.
type override struct {
	OverrideID string `json:"overrideId"`
	Duration   int64  `json:"duration"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
}

func toOverride(o overrides.Override) override {
	return override{OverrideID: o.ID, Duration: o.Duration.Milliseconds(), Identifier: o.Identifier, Limit: o.Limit}
}

func (h *Handler) setOverride(ctx context.Context, c *request) (any, error) {
	var in setOverrideRequest
	if err := decode(c.body, &in); err != nil {
		return nil, err
	}
	ctx = call.WithRequestID(ctx, c.requestID)
	o, err := h.pipeline.SetLimitOverride(ctx, overrides.Override{Namespace: in.Namespace,
		Identifier: in.Identifier, Limit: in.Limit, Duration: pipeline.Milliseconds(in.Duration)})
	if err != nil {
		return nil, err
	}
	return struct {
		OverrideID string `json:"overrideId"`
	}{o.ID}, nil
}

func (h *Handler) getOverride(ctx context.Context, c *request) (any, error) {
	var in overrideKey
	if err := decode(c.body, &in); err != nil {
		return nil, err
	}
	o, err := h.pipeline.GetOverride(ctx, in.Namespace, in.Identifier)
	if err != nil {
		return nil, err
	}
	return toOverride(o), nil
}

func (h *Handler) deleteOverride(ctx context.Context, c *request) (any, error) {
	var in overrideKey
	if err := decode(c.body, &in); err != nil {
		return nil, err
	}
	ctx = call.WithRequestID(ctx, c.requestID)
	if err := h.pipeline.DeleteOverride(ctx, in.Namespace, in.Identifier); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// listOverrides answers a page of overrides with Unkey's pagination object
// beside data: {meta, data: [...], pagination: {cursor, hasMore}}.
func (h *Handler) listOverrides(ctx context.Context, c *request) (any, error) {
	var in struct {
		Namespace string `json:"namespace"`
		Cursor    string `json:"cursor"`
		Limit     int    `json:"limit"`
	}
	if err := decode(c.body, &in); err != nil {
		return nil, err
	}
	page, next, err := h.pipeline.ListOverrides(ctx, in.Namespace, in.Cursor, in.Limit)
	if err != nil {
		return nil, err
	}
	data := make([]override, len(page))
	for i, o := range page {
		data[i] = toOverride(o)
	}
	return paginated{data: data, pagination: pagination{Cursor: next, HasMore: next != ""}}, nil
}

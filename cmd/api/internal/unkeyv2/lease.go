package unkeyv2

import (
	"context"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// acquireRequest is the body of /v2/ratelimit.acquire, this service's
// addition to Unkey's routes: a concurrency limit (see
// pipeline.Pipeline.Acquire). Lease is in seconds; cost defaults to 1.
type acquireRequest struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Lease      int64  `json:"lease"`
	Cost       *int64 `json:"cost"`
}

// leaseData answers /v2/ratelimit.acquire and /v2/ratelimit.extend.
type leaseData struct {
	Success    bool   `json:"success"`
	LeaseID    string `json:"leaseId,omitempty"`
	InFlight   int64  `json:"inFlight"`
	Limit      int64  `json:"limit"`
	RetryAfter int64  `json:"retryAfter"`
	ExpiresAt  int64  `json:"expiresAt,omitempty"`
	OverrideID string `json:"overrideId,omitempty"`
}

// releaseRequest is the body of /v2/ratelimit.release.
type releaseRequest struct {
	LeaseID string `json:"leaseId"`
}

// releaseData answers /v2/ratelimit.release.
type releaseData struct {
	Released bool `json:"released"`
	// InFlight is -1 when this process could not count the slots held
	// (see pipeline.Released).
	InFlight int64 `json:"inFlight"`
	Limit    int64 `json:"limit"`
}

// extendRequest is the body of /v2/ratelimit.extend. Lease, in seconds,
// is how long from now, any lease within bounds; left out, the one the
// slots were acquired or last extended with.
type extendRequest struct {
	LeaseID string `json:"leaseId"`
	Lease   int64  `json:"lease"`
}

func (h *Handler) acquire(ctx context.Context, c *request) (any, error) {
	var in acquireRequest
	if err := decode(c.body, &in); err != nil {
		return nil, err
	}
	cost := int64(1)
	if in.Cost != nil {
		cost = *in.Cost
	}
	l, err := h.pipeline.Acquire(ctx, ratelimit.Acquisition{Namespace: in.Namespace, Identifier: in.Identifier,
		Limit: in.Limit, Lease: pipeline.Seconds(in.Lease), Cost: cost})
	if err != nil {
		return nil, err
	}
	return lease(l), nil
}

func (h *Handler) release(ctx context.Context, c *request) (any, error) {
	var in releaseRequest
	if err := decode(c.body, &in); err != nil {
		return nil, err
	}
	r, err := h.pipeline.Release(ctx, in.LeaseID)
	if err != nil {
		return nil, err
	}
	return &releaseData{Released: r.Freed > 0, InFlight: r.InFlight, Limit: r.Limit}, nil
}

func (h *Handler) extend(ctx context.Context, c *request) (any, error) {
	var in extendRequest
	if err := decode(c.body, &in); err != nil {
		return nil, err
	}
	l, err := h.pipeline.Extend(ctx, in.LeaseID, pipeline.Seconds(in.Lease))
	if err != nil {
		return nil, err
	}
	return lease(l), nil
}

// lease is the answer of a lease.
func lease(l pipeline.Lease) *leaseData {
	out := &leaseData{Success: l.Success, LeaseID: l.ID, InFlight: l.InFlight, Limit: l.Limit,
		RetryAfter: l.RetryAfter.Milliseconds(), OverrideID: l.OverrideID}
	if !l.ExpiresAt.IsZero() {
		out.ExpiresAt = l.ExpiresAt.UnixMilli()
	}
	return out
}

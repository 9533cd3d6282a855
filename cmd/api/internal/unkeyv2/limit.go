package unkeyv2

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/internal/ratelimitheader"
	"github.com/unkeyed/ratelimit/internal/wirecount"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// maxIdentifier is the longest identifier Unkey accepts. The limiter keys
// counters by at most ratelimit.MaxNameLength characters, so a longer
// identifier is counted under its digest (see pipeline.CounterIdentifier).
const maxIdentifier = 512

// limitRequest is V2RatelimitLimitRequestBody. Numbers are JSON numbers;
// cost defaults to 1.
type limitRequest struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Duration   int64  `json:"duration"`
	Cost       *int64 `json:"cost"`
	// Report is this service's addition to Unkey's body: a usage report,
	// counted whatever the verdict (see ratelimit.Request.Report).
	Report bool `json:"report"`
	// Reserve is this service's addition too: a reservation, answered
	// with a token to settle (see pipeline.Pipeline.Settle).
	Reserve bool `json:"reserve"`
}

// call converts r. Unkey accepts identifiers of up to 512 characters; one
// over 255 is counted under its digest.
func (r *limitRequest) call() pipeline.Call {
	cost := int64(1)
	if r.Cost != nil {
		cost = *r.Cost
	}
	return pipeline.Call{Request: ratelimit.Request{Namespace: r.Namespace, Identifier: r.Identifier,
		Limit: r.Limit, Duration: pipeline.Milliseconds(r.Duration), Cost: cost, Report: r.Report, Reserve: r.Reserve}, Bounds: ratelimit.Bounds{MaxIdentifier: maxIdentifier}}
}

// limitData is V2RatelimitLimitResponseData.
type limitData struct {
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	Reset      int64  `json:"reset"`
	Success    bool   `json:"success"`
	OverrideID string `json:"overrideId,omitempty"`
	// Reservation is the token of an admitted reservation.
	Reservation string `json:"reservation,omitempty"`
}

func (h *Handler) limit(ctx context.Context, c *request) (any, error) {
	var in limitRequest
	if err := decode(c.body, &in); err != nil {
		return nil, err
	}
	d, err := h.pipeline.Limit(ctx, in.call())
	if err != nil {
		return nil, err
	}
	// The IETF's fields, for an application to copy onto its own answer.
	ratelimitheader.Set(c.header, in.Namespace, d.Quota, d.QuotaWindow, d.Remaining, time.Until(d.Reset))
	return &limitData{Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset.UnixMilli(),
		Success: d.Success, OverrideID: d.OverrideID, Reservation: d.Reservation}, nil
}

// settleRequest is the body of /v2/ratelimit.settle, this service's
// addition to Unkey's routes.
type settleRequest struct {
	Reservation string `json:"reservation"`
	Cost        *int64 `json:"cost"`
}

// settleData answers /v2/ratelimit.settle.
type settleData struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset"`
	Success   bool  `json:"success"`
	Refunded  int64 `json:"refunded"`
}

func (h *Handler) settle(ctx context.Context, c *request) (any, error) {
	var in settleRequest
	if err := decode(c.body, &in); err != nil {
		return nil, err
	}
	d, err := h.pipeline.Settle(ctx, in.Reservation, in.Cost)
	if err != nil {
		return nil, err
	}
	return &settleData{Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset.UnixMilli(), Success: d.Success,
		Refunded: d.Refunded}, nil
}

// multiLimitCheck is V2RatelimitMultiLimitCheck.
type multiLimitCheck struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	Reset      int64  `json:"reset"`
	Passed     bool   `json:"passed"`
	OverrideID string `json:"overrideId,omitempty"`
}

// multiLimitData is V2RatelimitMultiLimitResponseData.
type multiLimitData struct {
	Passed bool              `json:"passed"`
	Limits []multiLimitCheck `json:"limits"`
}

// multiLimit decides a bare array of limits all or nothing. The array's
// entries are counted before it is decoded, so an oversized one costs no
// decoding; the pipeline's names of its entries ("limits[2].cost") are
// the body's ("[2].cost", body[2].cost).
func (h *Handler) multiLimit(ctx context.Context, c *request) (any, error) {
	if wirecount.JSONValues(c.body, wirecount.RootArray, ratelimit.MaxBatch) > ratelimit.MaxBatch {
		return nil, ratelimit.CheckBatchSize("body", ratelimit.MaxBatch+1, ratelimit.MaxBatch)
	}
	var in []limitRequest
	if err := decode(c.body, &in); err != nil {
		return nil, err
	}
	if err := ratelimit.CheckBatchSize("body", len(in), ratelimit.MaxBatch); err != nil {
		return nil, err
	}
	calls := make([]pipeline.Call, len(in))
	for i := range in {
		calls[i] = in[i].call()
	}
	m, err := h.pipeline.Multi(ctx, calls)
	var ve *invalid.Error
	if errors.As(err, &ve) {
		return nil, &invalid.Error{Field: strings.TrimPrefix(ve.Field, "limits"), Rule: ve.Rule}
	}
	if err != nil {
		return nil, err
	}
	out := multiLimitData{Passed: m.Passed, Limits: make([]multiLimitCheck, len(m.Results))}
	for i, d := range m.Results {
		out.Limits[i] = multiLimitCheck{Namespace: in[i].Namespace, Identifier: in[i].Identifier, Limit: d.Limit,
			Remaining: d.Remaining, Reset: d.Reset.UnixMilli(), Passed: d.Success, OverrideID: d.OverrideID}
	}
	return out, nil
}

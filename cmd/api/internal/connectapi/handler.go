// Package connectapi is the adapter of ratelimit.v1.RatelimitService, the
// API's own protocol, onto the request pipeline: Connect (JSON or
// protobuf, which curl and browsers speak), gRPC and gRPC-Web through
// connect-go on the main port, and gRPC through grpc-go on UNKEY_GRPC_ADDR.
// It translates the service's messages to the pipeline's calls and the
// decisions back; the shared HTTP layer (package transport) authenticates,
// caps and recovers, and answers failures by its gRPC table.
package connectapi

import (
	"context"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/internal/ratelimitheader"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
)

// Handler serves RatelimitService on a layer's pipeline.
type Handler struct {
	layer    *transport.Layer
	pipeline *pipeline.Pipeline
}

var _ ratelimitv1connect.RatelimitServiceHandler = (*Handler)(nil)

// New returns the service deciding on p, its routes behind l.
func New(l *transport.Layer, p *pipeline.Pipeline) *Handler { return &Handler{layer: l, pipeline: p} }

// Register serves the service on mux behind the layer: Connect, gRPC and
// gRPC-Web on one path prefix.
func (h *Handler) Register(mux *http.ServeMux) {
	path, service := ratelimitv1connect.NewRatelimitServiceHandler(h, h.layer.HandlerOptions(codecs)...)
	mux.Handle(path, route(h.layer, ratelimitv1.File_ratelimit_v1_ratelimit_proto.Services().ByName("RatelimitService"), service))
}

// fail answers err, the failure of procedure, by the layer's gRPC table.
func (h *Handler) fail(ctx context.Context, procedure string, err error) error {
	return h.layer.ConnectError(ctx, procedure, err)
}

// Limit implements RatelimitService.Limit.
func (h *Handler) Limit(ctx context.Context, req *connect.Request[ratelimitv1.LimitRequest]) (*connect.Response[ratelimitv1.LimitResponse], error) {
	r, err := toRequest(req.Msg)
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceLimitProcedure, err)
	}
	d, err := h.pipeline.Limit(ctx, toCall(r, req.Msg))
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceLimitProcedure, err)
	}
	res := connect.NewResponse(&ratelimitv1.LimitResponse{
		Success:      d.Success,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		Reset_:       d.Reset.UnixMilli(),
		RetryAfter:   d.RetryAfter.Milliseconds(),
		OverrideId:   d.OverrideID,
		Reservation:  d.Reservation,
		Algorithm:    answered(d.Algorithm, !r.Calendar.IsZero()),
		ShadowDenied: d.ShadowDenied,
		Penalized:    d.Penalized,
		Wait:         d.Wait.Milliseconds(),
	})
	// The IETF's fields, for an application to copy onto its own answer
	// (gRPC carries them as header metadata). A call through the grpc-go
	// port has no Connect protocol, and its answer no headers: they were
	// a thirtieth of its CPU, written for nothing.
	if req.Peer().Protocol != "" {
		ratelimitheader.Set(res.Header(), req.Msg.GetNamespace(), d.Quota, d.QuotaWindow, d.Remaining, time.Until(d.Reset))
	}
	return res, nil
}

// Settle implements RatelimitService.Settle.
func (h *Handler) Settle(ctx context.Context, req *connect.Request[ratelimitv1.SettleRequest]) (*connect.Response[ratelimitv1.SettleResponse], error) {
	d, err := h.pipeline.Settle(ctx, req.Msg.GetReservation(), req.Msg.Cost)
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceSettleProcedure, err)
	}
	return connect.NewResponse(&ratelimitv1.SettleResponse{
		Success:   d.Success,
		Limit:     d.Limit,
		Remaining: d.Remaining,
		Reset_:    d.Reset.UnixMilli(),
		Refunded:  d.Refunded,
	}), nil
}

// MultiLimit implements RatelimitService.MultiLimit.
func (h *Handler) MultiLimit(ctx context.Context, req *connect.Request[ratelimitv1.MultiLimitRequest]) (*connect.Response[ratelimitv1.MultiLimitResponse], error) {
	cs, err := calls(req.Msg.Limits)
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceMultiLimitProcedure, err)
	}
	m, err := h.pipeline.Multi(ctx, cs)
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceMultiLimitProcedure, err)
	}
	out := &ratelimitv1.MultiLimitResponse{Passed: m.Passed, Results: make([]*ratelimitv1.MultiLimitResult, len(m.Results))}
	for i, d := range m.Results {
		out.Results[i] = result(req.Msg.Limits[i], d)
	}
	return connect.NewResponse(out), nil
}

// BatchLimit implements RatelimitService.BatchLimit: each request is decided
// and counted on its own, as a Limit call would be, in one round trip (see
// pipeline.Batch).
func (h *Handler) BatchLimit(ctx context.Context, req *connect.Request[ratelimitv1.BatchLimitRequest]) (*connect.Response[ratelimitv1.BatchLimitResponse], error) {
	cs, err := calls(req.Msg.Limits)
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceBatchLimitProcedure, err)
	}
	ds, err := h.pipeline.Batch(ctx, cs)
	if err != nil {
		return nil, h.fail(ctx, ratelimitv1connect.RatelimitServiceBatchLimitProcedure, err)
	}
	out := &ratelimitv1.BatchLimitResponse{Results: make([]*ratelimitv1.MultiLimitResult, len(ds))}
	for i, d := range ds {
		out.Results[i] = result(req.Msg.Limits[i], d)
	}
	return connect.NewResponse(out), nil
}

// toRequest converts an API request. An absent cost means 1. An algorithm
// or a calendar unit the API does not name (binary protobuf, or a number
// in JSON, takes any) is refused as this API spells them, and a zone not
// of the database naming its field.
func toRequest(m *ratelimitv1.LimitRequest) (ratelimit.Request, error) {
	cost := int64(1)
	if m != nil && m.Cost != nil {
		cost = *m.Cost
	}
	alg := m.GetAlgorithm()
	switch {
	case alg < ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW || alg > ratelimitv1.Algorithm_ALGORITHM_CALENDAR:
		// A number no name has (binary protobuf, or a number in JSON):
		// named as this API spells its values.
		return ratelimit.Request{}, &invalid.Error{Field: "algorithm", Rule: algorithmRule}
	case alg == ratelimitv1.Algorithm_ALGORITHM_CALENDAR && m.GetCalendar() == nil:
		return ratelimit.Request{}, &invalid.Error{Field: "calendar",
			Rule: "missing: ALGORITHM_CALENDAR counts in the periods of a calendar ({\"unit\": \"CALENDAR_UNIT_MONTH\"}, say)"}
	case alg == ratelimitv1.Algorithm_ALGORITHM_CALENDAR:
		// The limiter's calendar is a fixed window of calendar periods.
		alg = ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW
	}
	r := ratelimit.Request{
		Namespace:  m.GetNamespace(),
		Identifier: m.GetIdentifier(),
		Limit:      m.GetLimit(),
		Duration:   pipeline.Milliseconds(m.GetDuration()),
		Cost:       cost,
		Report:     m.GetReport(),
		Reserve:    m.GetReserve(),
		Algorithm:  ratelimit.Algorithm(alg), // one of the API's: checked above
		Burst:      m.GetBurst(),
		MaxWait:    pipeline.Milliseconds(m.GetMaxWait()),
	}
	if c := m.GetCalendar(); c != nil {
		if u := c.GetUnit(); u < ratelimitv1.CalendarUnit_CALENDAR_UNIT_DAY || u > ratelimitv1.CalendarUnit_CALENDAR_UNIT_YEAR {
			return ratelimit.Request{}, &invalid.Error{Field: "calendar.unit", Rule: unitRule}
		}
		p, err := ratelimit.NewCalendar(calendar.Unit(c.GetUnit()), c.GetTimeZone())
		if err != nil {
			return ratelimit.Request{}, err
		}
		r.Calendar = p
	}
	return r, nil
}

// The rules of the enum fields, in the values' names as the wire spells
// them, from the proto's descriptors: every algorithm, every unit but the
// unset one.
var (
	algorithmRule = mustBeOneOf(ratelimitv1.Algorithm(0).Descriptor(), ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW.Number())
	unitRule      = mustBeOneOf(ratelimitv1.CalendarUnit(0).Descriptor(), ratelimitv1.CalendarUnit_CALENDAR_UNIT_DAY.Number())
)

// mustBeOneOf is the rule "must be A, B or C" of the values of ed numbered
// first or more.
func mustBeOneOf(ed protoreflect.EnumDescriptor, first protoreflect.EnumNumber) string {
	var names []string
	for i := range ed.Values().Len() {
		if v := ed.Values().Get(i); v.Number() >= first {
			names = append(names, string(v.Name()))
		}
	}
	return "must be " + strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// calls converts the requests of a batch, naming a refused one by its
// place ("limits[2].calendar.unit").
func calls(limits []*ratelimitv1.LimitRequest) ([]pipeline.Call, error) {
	out := make([]pipeline.Call, len(limits))
	for i, l := range limits {
		r, err := toRequest(l)
		if err != nil {
			return nil, invalid.InEntry("limits", i, err)
		}
		out[i] = toCall(r, l)
	}
	return out, nil
}

// result answers one entry of a batch, repeating its key as sent.
func result(l *ratelimitv1.LimitRequest, d pipeline.Decision) *ratelimitv1.MultiLimitResult {
	return &ratelimitv1.MultiLimitResult{
		Namespace:    l.GetNamespace(),
		Identifier:   l.GetIdentifier(),
		Success:      d.Success,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		Reset_:       d.Reset.UnixMilli(),
		RetryAfter:   d.RetryAfter.Milliseconds(),
		OverrideId:   d.OverrideID,
		Algorithm:    answered(d.Algorithm, l.GetCalendar() != nil),
		ShadowDenied: d.ShadowDenied,
		Penalized:    d.Penalized,
		Wait:         d.Wait.Milliseconds(),
	}
}

// toCall is the call of r, converted from m: its policies beside it.
func toCall(r ratelimit.Request, m *ratelimitv1.LimitRequest) pipeline.Call {
	return pipeline.Call{Request: r, Shadow: m.GetShadow(),
		Penalty: pipeline.Milliseconds(m.GetPenalty()), PenaltyMax: pipeline.Milliseconds(m.GetPenaltyMax())}
}

// answered is the algorithm a decision by alg answers: a calendar's own
// name for a request with a calendar (the limiter decides it as a fixed
// window), so that an answer says which windows it counted in.
func answered(alg ratelimit.Algorithm, calendar bool) ratelimitv1.Algorithm {
	if calendar {
		return ratelimitv1.Algorithm_ALGORITHM_CALENDAR
	}
	return ratelimitv1.Algorithm(alg)
}

// route returns service, the connect-go handler of sd, behind the layer:
// a path that names no method of sd, or an HTTP method other than POST, is
// answered in JSON (see transport.KnownMethods) once the caller is
// authenticated, and so is a POST of a content type connect-go does not
// take (transport.RequireContentType).
func route(l *transport.Layer, sd protoreflect.ServiceDescriptor, service http.Handler) http.Handler {
	return l.Route("", l.ConnectRenderer(), transport.KnownMethods(sd, transport.RequireContentType(service)), methodNames(sd)...)
}

// methodNames returns the names of a service's methods: the last segments
// of its procedures, which the latency metric labels.
func methodNames(sd protoreflect.ServiceDescriptor) []string {
	methods := sd.Methods()
	names := make([]string, methods.Len())
	for i := range names {
		names[i] = string(methods.Get(i).Name())
	}
	return names
}

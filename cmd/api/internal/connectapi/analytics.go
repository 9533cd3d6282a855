package connectapi

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Analytics serves AnalyticsService on a layer, reading an analytics store
// and the fleet's roll call.
type Analytics struct {
	layer *transport.Layer
	store analytics.Store
	fleet analytics.Fleet
	self  AnalyticsProcess
	// queries holds each workspace's queries in flight, at most
	// QueriesPerWorkspace. Workspaces come from the keys.
	queries sync.Map // string → chan struct{}
}

// QueriesPerWorkspace is the most analytics queries (GetRatelimits,
// ListNamespaces) one workspace has running at once in a process; more
// wait their turn, up to QueryTimeout. MySQL's requests pool is five
// connections: one tenant's slow queries leave the others three.
const QueriesPerWorkspace = 2

// QueryTimeout bounds one analytics query, its wait for a turn included:
// a query of months of a busy tenant's rows is cancelled instead of
// holding a connection for minutes.
const QueryTimeout = 5 * time.Second

// QueriesBusyError refuses an analytics query whose workspace had
// QueriesPerWorkspace running for all of QueryTimeout.
type QueriesBusyError struct{}

func (QueriesBusyError) Error() string {
	return fmt.Sprintf("too many analytics queries of this workspace at once: at most %d run at a time in a process, "+
		"and this one waited %s for its turn; try again", QueriesPerWorkspace, QueryTimeout)
}

// Exhausted marks the error a cap's refusal (resource_exhausted).
func (QueriesBusyError) Exhausted() bool { return true }

// query runs f, a query of the caller's workspace, within QueryTimeout
// and its workspace's turn.
func (h *Analytics) query(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, QueryTimeout)
	defer cancel()
	ws := call.Workspace(ctx)
	g, ok := h.queries.Load(ws)
	if !ok {
		g, _ = h.queries.LoadOrStore(ws, make(chan struct{}, QueriesPerWorkspace))
	}
	turn := g.(chan struct{})
	select {
	case turn <- struct{}{}:
	case <-ctx.Done():
		return QueriesBusyError{}
	}
	defer func() { <-turn }()
	return f(ctx)
}

var _ ratelimitv1connect.AnalyticsServiceHandler = (*Analytics)(nil)

// AnalyticsProcess is what GetStatus says of the process that answers.
type AnalyticsProcess struct {
	// Region is its region.
	Region string
	// FlushInterval is how often its recorder adds to the store.
	FlushInterval time.Duration
	// InMemory is true when its store and roll call are its own memory
	// (no MySQL): they hold its own decisions only.
	InMemory bool
}

// NewAnalytics returns AnalyticsService on l, reading store and fleet, for
// the process self describes.
func NewAnalytics(l *transport.Layer, store analytics.Store, fleet analytics.Fleet, self AnalyticsProcess) *Analytics {
	return &Analytics{layer: l, store: store, fleet: fleet, self: self}
}

// Register serves the service on mux behind the layer.
func (h *Analytics) Register(mux *http.ServeMux) {
	path, service := ratelimitv1connect.NewAnalyticsServiceHandler(h, h.layer.HandlerOptions(codecs)...)
	mux.Handle(path, route(h.layer, ratelimitv1.File_ratelimit_v1_analytics_proto.Services().ByName("AnalyticsService"), service))
}

// RegisterGRPC serves AnalyticsService on a grpc-go server of the layer.
func (h *Analytics) RegisterGRPC(srv *grpc.Server) {
	const service = ratelimitv1connect.AnalyticsServiceName
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			grpcMethod(service, "GetRatelimits", h.GetRatelimits),
			grpcMethod(service, "ListNamespaces", h.ListNamespaces),
			grpcMethod(service, "GetStatus", h.GetStatus),
		},
		Metadata: "ratelimit/v1/analytics.proto",
	}, struct{}{})
}

// Bounds of a GetRatelimits request.
const (
	maxBuckets = 1440
	defaultTop = 10
	maxTop     = 100
)

// GetRatelimits implements AnalyticsService.GetRatelimits.
func (h *Analytics) GetRatelimits(ctx context.Context, req *connect.Request[ratelimitv1.GetRatelimitsRequest]) (*connect.Response[ratelimitv1.GetRatelimitsResponse], error) {
	out, err := h.getRatelimits(ctx, req.Msg)
	if err != nil {
		return nil, h.layer.ConnectError(ctx, ratelimitv1connect.AnalyticsServiceGetRatelimitsProcedure, err)
	}
	return connect.NewResponse(out), nil
}

func (h *Analytics) getRatelimits(ctx context.Context, m *ratelimitv1.GetRatelimitsRequest) (*ratelimitv1.GetRatelimitsResponse, error) {
	if err := ratelimit.CheckName("namespace", m.GetNamespace(), ratelimit.MaxNameLength); err != nil {
		return nil, err
	}
	var g analytics.Granularity
	switch m.GetGranularity() {
	case "", "minute":
		g = analytics.Minute
	case "hour":
		g = analytics.Hour
	case "day":
		g = analytics.Day
	default:
		return nil, &invalid.Error{Field: "granularity", Rule: `must be "minute", "hour" or "day"`}
	}
	from, to := m.GetFrom(), m.GetTo()
	if from < 0 {
		return nil, &invalid.Error{Field: "from", Rule: "must be a time in unix milliseconds, 0 or more"}
	}
	if to <= from || (to-from)/g.Duration().Milliseconds() > maxBuckets {
		return nil, &invalid.Error{Field: "to", Rule: "must be after from, by at most 1440 buckets of the granularity"}
	}
	top := int(m.GetTop())
	switch {
	case top == 0:
		top = defaultTop
	case top < 1 || top > maxTop:
		return nil, &invalid.Error{Field: "top", Rule: "must be between 1 and 100, or 0 for 10"}
	}
	if err := call.Authorize(ctx, access.ReadAnalytics, m.GetNamespace()); err != nil {
		return nil, err
	}
	ws := call.Workspace(ctx)
	var series []analytics.Point
	var named []analytics.Identifier
	if err := h.query(ctx, func(ctx context.Context) (err error) {
		if series, err = h.store.Series(ctx, ws, m.GetNamespace(), g, time.UnixMilli(from), time.UnixMilli(to)); err != nil {
			return err
		}
		named, err = h.store.Top(ctx, ws, m.GetNamespace(), time.UnixMilli(from), time.UnixMilli(to), top)
		return err
	}); err != nil {
		return nil, err
	}
	out := &ratelimitv1.GetRatelimitsResponse{Series: make([]*ratelimitv1.RatelimitPoint, len(series)),
		Top: make([]*ratelimitv1.RatelimitIdentifier, len(named))}
	for i, p := range series {
		out.Series[i] = &ratelimitv1.RatelimitPoint{Time: p.Start.UnixMilli(), Passed: p.Passed, Denied: p.Denied,
			ShadowDenied: p.ShadowDenied}
	}
	for i, it := range named {
		out.Top[i] = &ratelimitv1.RatelimitIdentifier{Identifier: it.Identifier, Passed: it.Passed, Denied: it.Denied,
			ShadowDenied: it.ShadowDenied}
	}
	return out, nil
}

// maxNamespaces is the most namespaces ListNamespaces answers.
const maxNamespaces = 100

// ListNamespaces implements AnalyticsService.ListNamespaces.
func (h *Analytics) ListNamespaces(ctx context.Context, req *connect.Request[ratelimitv1.ListNamespacesRequest]) (*connect.Response[ratelimitv1.ListNamespacesResponse], error) {
	from, to := req.Msg.GetFrom(), req.Msg.GetTo()
	var err error
	switch {
	case from < 0:
		err = &invalid.Error{Field: "from", Rule: "must be a time in unix milliseconds, 0 or more"}
	case to <= from || to-from > analytics.DayRetention.Milliseconds():
		err = &invalid.Error{Field: "to", Rule: "must be after from, by at most 400 days"}
	}
	if err == nil && !call.PrincipalOf(ctx).Permissions.AllowsSome(access.ReadAnalytics) {
		// Authorized before any query: a key that may read no namespace's
		// analytics costs the database nothing.
		err = &access.DeniedError{Permission: access.Name(access.ReadAnalytics, "<namespace>"),
			Reason: "ListNamespaces lists the namespaces whose analytics a key may read, and this key lacks " +
				access.Name(access.ReadAnalytics, "<namespace>") + " for every namespace"}
	}
	var names []analytics.Identifier
	if err == nil {
		// Read more than are answered: those the caller may not read are
		// left out.
		err = h.query(ctx, func(ctx context.Context) (err error) {
			names, err = h.store.Namespaces(ctx, call.Workspace(ctx), time.UnixMilli(from), time.UnixMilli(to), 10*maxNamespaces)
			return err
		})
	}
	if err != nil {
		return nil, h.layer.ConnectError(ctx, ratelimitv1connect.AnalyticsServiceListNamespacesProcedure, err)
	}
	out := &ratelimitv1.ListNamespacesResponse{}
	for _, n := range names {
		if call.Authorize(ctx, access.ReadAnalytics, n.Identifier) != nil {
			// Counted, never named: the caller learns why its view is
			// empty, not what it may not read.
			out.Withheld++
			continue
		}
		if len(out.Namespaces) < maxNamespaces {
			out.Namespaces = append(out.Namespaces, &ratelimitv1.NamespaceTotal{Namespace: n.Identifier, Passed: n.Passed, Denied: n.Denied,
				ShadowDenied: n.ShadowDenied})
		}
	}
	return connect.NewResponse(out), nil
}

// statusWindow is how recently a process must have reported to be listed,
// live or gone (analytics.Process.Live).
const statusWindow = 5 * time.Minute

// GetStatus implements AnalyticsService.GetStatus. The fleet's processes,
// regions and Redis addresses are the operator's: a key needs
// status.read, which a tenant's key holds only if given.
func (h *Analytics) GetStatus(ctx context.Context, _ *connect.Request[ratelimitv1.GetStatusRequest]) (*connect.Response[ratelimitv1.GetStatusResponse], error) {
	if !call.PrincipalOf(ctx).Permissions.Has(access.ReadStatus) {
		return nil, h.layer.ConnectError(ctx, ratelimitv1connect.AnalyticsServiceGetStatusProcedure,
			&access.DeniedError{Permission: access.ReadStatus})
	}
	procs, now, err := h.fleet.Processes(ctx, statusWindow)
	if err != nil {
		return nil, h.layer.ConnectError(ctx, ratelimitv1connect.AnalyticsServiceGetStatusProcedure, err)
	}
	out := &ratelimitv1.GetStatusResponse{Region: h.self.Region, Processes: make([]*ratelimitv1.ProcessStatus, len(procs)),
		AnalyticsInMemory: h.self.InMemory, FlushIntervalMs: h.self.FlushInterval.Milliseconds()}
	for i, p := range procs {
		ps := &ratelimitv1.ProcessStatus{Id: p.ID, Region: p.Region, SeenAgoMs: max(now.Sub(p.SeenAt).Milliseconds(), 0),
			LastSyncAgoMs: -1, RedisNodes: p.Breakers, FlushIntervalMs: p.ReportInterval().Milliseconds(), Live: p.Live(now)}
		if !p.LastSync.IsZero() {
			ps.LastSyncAgoMs = max(now.Sub(p.LastSync).Milliseconds(), 0)
		}
		out.Processes[i] = ps
	}
	return connect.NewResponse(out), nil
}

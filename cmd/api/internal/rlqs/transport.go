package rlqs

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
)

// ServiceName and Procedure name Envoy's quota service and its one method.
var (
	ServiceName = rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName
	Procedure   = "/" + ServiceName + "/StreamRateLimitQuotas"
)

// Adapter serves a Service on both gRPC ports behind the layer: the main
// port's connect-go (gRPC over HTTP/2, as Envoy speaks it) and the grpc-go
// port. A stream is authenticated as Envoy's rate limit calls are, when
// it opens (a key, or mutual TLS), and counts in its key's workspace.
type Adapter struct {
	*Service
	layer *transport.Layer
}

// NewAdapter returns s served behind layer.
func NewAdapter(layer *transport.Layer, s *Service) *Adapter {
	return &Adapter{Service: s, layer: layer}
}

// Services returns Envoy's quota service.
func (a *Adapter) Services() []string { return []string{ServiceName} }

// Routes names no route besides the service's.
func (a *Adapter) Routes() string { return "" }

// Codecs returns no hook: a report is decoded as it is.
func (a *Adapter) Codecs() transport.Codecs { return transport.Codecs{} }

// RegisterGRPC serves the service on a grpc-go server of the layer (see
// [transport.Layer.GRPCServer]), which lifts a stream's deadline once its
// first report arrives.
func (a *Adapter) RegisterGRPC(srv *grpc.Server) {
	rlqsv3.RegisterRateLimitQuotaServiceServer(srv, a.Service)
}

// Register serves the service on mux, as a long-lived stream (see
// [transport.Layer.StreamRoute]). Any other path under the service's
// prefix is answered that the service has no such method.
func (a *Adapter) Register(mux *http.ServeMux) {
	l := a.layer
	sd := rlqsv3.File_envoy_service_rate_limit_quota_v3_rlqs_proto.Services().ByName("RateLimitQuotaService")
	mux.Handle("/"+ServiceName+"/", l.StreamRoute(l.ConnectRenderer(), transport.KnownMethods(sd, connect.NewBidiStreamHandler(Procedure,
		func(ctx context.Context, bs *connect.BidiStream[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
			err := a.Serve(bs.Peer().Addr, connectStream{ctx: ctx, bs: bs})
			var ce *connect.Error
			switch {
			case err == nil:
				return nil
			case errors.As(err, &ce):
				return ce // the stream's own: a reset, a message over the cap
			}
			if st, ok := status.FromError(err); ok {
				return connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
			}
			return l.ConnectError(ctx, Procedure, err)
		}, l.StreamHandlerOptions(transport.Codecs{})...))))
}

// connectStream is a connect-go stream as Serve reads it.
type connectStream struct {
	ctx context.Context
	bs  *connect.BidiStream[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
}

func (c connectStream) Context() context.Context { return c.ctx }

func (c connectStream) Recv() (*rlqsv3.RateLimitQuotaUsageReports, error) { return c.bs.Receive() }

func (c connectStream) Send(resp *rlqsv3.RateLimitQuotaResponse) error { return c.bs.Send(resp) }

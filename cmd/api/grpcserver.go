package main

import (
	"context"
	"runtime/debug"
	"strings"

	"connectrpc.com/connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
)

// The main port serves gRPC through connect-go on net/http's HTTP/2
// server, beside Connect, gRPC-Web and the Unkey routes. For callers that
// send one small call at a time (an Envoy proxy calls once per request),
// its per-call cost is mostly HTTP/2 framing and the goroutine handoffs
// around it; grpc-go's own transport does the same work for about half the
// CPU (docs/BENCHMARKS.md). So UNKEY_GRPC_ADDR serves the same service over
// grpc-go on a port of its own, as gubernator serves gRPC: same handler,
// same auth, same bounds on messages and batches, with health and
// reflection.

// newGRPCServer returns a grpc-go server of the service, with health and
// reflection, and the function that marks it not serving at shutdown.
func (s *server) newGRPCServer() (*grpc.Server, func()) {
	h := &handler{pipeline: s.pipeline}
	srv := grpc.NewServer(
		// The messages are capped as on the main port, and a batch's
		// entries are counted before it is decoded (protoCodec).
		grpc.MaxRecvMsgSize(maxRequestBytes),
		grpc.ForceServerCodec(protoCodec{}),
		grpc.MaxConcurrentStreams(uint32(s.limits.maxConcurrentStreams)),
		grpc.MaxHeaderListSize(uint32(s.limits.maxHeaderBytes)),
		grpc.ConnectionTimeout(s.limits.readTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: s.limits.idleTimeout}),
		grpc.ChainUnaryInterceptor(s.grpcErrors, s.grpcAuth),
	)
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: ratelimitv1connect.RatelimitServiceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			grpcMethod("Limit", h.Limit),
			grpcMethod("MultiLimit", h.MultiLimit),
			grpcMethod("BatchLimit", h.BatchLimit),
			grpcMethod("SetOverride", h.SetOverride),
			grpcMethod("GetOverride", h.GetOverride),
			grpcMethod("ListOverrides", h.ListOverrides),
			grpcMethod("DeleteOverride", h.DeleteOverride),
		},
		Metadata: "ratelimit/v1/ratelimit.proto",
	}, struct{}{})
	rlsv3.RegisterRateLimitServiceServer(srv, s.rls)
	hs := health.NewServer()
	hs.SetServingStatus(ratelimitv1connect.RatelimitServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(rlsServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, hs.Shutdown
}

// grpcMethod adapts one method of the Connect handler to grpc-go.
func grpcMethod[Req, Res any](name string, fn func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) grpc.MethodDesc {
	full := "/" + ratelimitv1connect.RatelimitServiceName + "/" + name
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(_ any, ctx context.Context, decode func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
			in := new(Req)
			if err := decode(in); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, req any) (any, error) {
				resp, err := fn(ctx, connect.NewRequest(req.(*Req)))
				if err != nil {
					return nil, err
				}
				return resp.Msg, nil
			}
			return intercept(ctx, in, &grpc.UnaryServerInfo{FullMethod: full}, call)
		},
	}
}

// grpcAuth resolves the caller's workspace from its bearer token, as
// authenticate does on the main port (Envoy sends it when its grpc_service
// has initial_metadata). Health checks and reflection need none.
func (s *server) grpcAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, "/"+ratelimitv1connect.RatelimitServiceName+"/") && info.FullMethod != rlsProcedure {
		return next(ctx, req)
	}
	var authorization string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authorization = v[0]
		}
	}
	ws, err := s.pipeline.Authenticate(authorization)
	if err != nil {
		return nil, connectAuthError(err)
	}
	return next(pipeline.WithWorkspace(ctx, ws), req)
}

// grpcErrors turns the handler's Connect errors into gRPC statuses (the
// codes are the same numbers), keeps internal errors opaque as on the main
// port, and answers a panic as an internal error instead of crashing.
func (s *server) grpcErrors(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			id := newRequestID()
			s.logger.ErrorContext(ctx, "handler panicked", "request_id", id, "procedure", info.FullMethod,
				"panic", p, "stack", string(debug.Stack()))
			resp, err = nil, status.Error(codes.Internal, opaqueMessage(id))
		}
	}()
	resp, err = next(ctx, req)
	if err == nil {
		return resp, nil
	}
	if _, ok := status.FromError(err); ok {
		return nil, err
	}
	err = opaqueError(ctx, s.logger, info.FullMethod, err)
	return nil, status.Error(codes.Code(connect.CodeOf(err)), connectMessage(err))
}

// connectMessage returns a Connect error's message without its code.
func connectMessage(err error) string {
	if ce, ok := err.(*connect.Error); ok {
		return ce.Message()
	}
	return err.Error()
}

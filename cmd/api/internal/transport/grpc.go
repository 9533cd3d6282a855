package transport

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
)

// The main port serves gRPC through connect-go on net/http's HTTP/2
// server, beside Connect, gRPC-Web and the Unkey routes. For callers that
// send one small call at a time (an Envoy proxy calls once per request),
// its per-call cost is mostly HTTP/2 framing and the goroutine handoffs
// around it; grpc-go's own transport does the same work for about half the
// CPU (docs/BENCHMARKS.md). So UNKEY_GRPC_ADDR serves the same services
// over grpc-go on a port of its own, as gubernator serves gRPC: same
// handlers, same auth, same bounds on messages and batches.

// GRPCServer returns a grpc-go server with l's bounds, a codec that runs
// c.Decode before protobuf's, and the layer's authentication, failure
// rendering and panic recovery around every unary method. Health checks
// and reflection need no token. The adapters register their services on
// it.
func (l *Layer) GRPCServer(lim Limits, c Codecs) *grpc.Server {
	return grpc.NewServer(
		// The messages are capped as on the main port.
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.ForceServerCodec(protoCodec{c}),
		grpc.MaxConcurrentStreams(uint32(lim.MaxConcurrentStreams)),
		grpc.MaxHeaderListSize(uint32(lim.MaxHeaderBytes)),
		grpc.ConnectionTimeout(lim.ReadTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: lim.IdleTimeout}),
		grpc.ChainUnaryInterceptor(l.grpcFailures, l.grpcAuth),
	)
}

// grpcOpen reports whether a method needs no token: health checks and
// reflection.
func grpcOpen(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.") || strings.HasPrefix(fullMethod, "/grpc.reflection.")
}

// grpcAuth resolves the caller's workspace from its bearer token, as the
// layer does on the main port (Envoy sends it when its grpc_service has
// initial_metadata).
func (l *Layer) grpcAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if grpcOpen(info.FullMethod) {
		return next(ctx, req)
	}
	var authorization string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authorization = v[0]
		}
	}
	ws, err := l.pipeline.Authenticate(authorization)
	if err != nil {
		return nil, err
	}
	return next(pipeline.WithWorkspace(ctx, ws), req)
}

// grpcFailures answers every failure of a method as the gRPC status of its
// Connect error (the codes are the same numbers; see
// [Layer.ConnectError]), and a panic as an internal error instead of
// crashing.
func (l *Layer) grpcFailures(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, grpcStatus(l.ConnectError(ctx, info.FullMethod, l.panicked(ctx, info.FullMethod, p)))
		}
	}()
	resp, err = next(ctx, req)
	if err == nil {
		return resp, nil
	}
	if _, ok := status.FromError(err); ok {
		return nil, err
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		ce = l.ConnectError(ctx, info.FullMethod, err)
	}
	return nil, grpcStatus(ce)
}

// grpcStatus returns a Connect error as a gRPC status.
func grpcStatus(ce *connect.Error) error {
	return status.Error(codes.Code(ce.Code()), ce.Message())
}

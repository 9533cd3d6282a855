package connectapi

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/grpc"

	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
)

// RegisterGRPC serves the service on a grpc-go server of the layer (see
// [transport.Layer.GRPCServer]), with the same handlers as on the main
// port.
func (h *Handler) RegisterGRPC(srv *grpc.Server) {
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

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
	const service = ratelimitv1connect.RatelimitServiceName
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			grpcMethod(service, "Limit", h.Limit),
			grpcMethod(service, "MultiLimit", h.MultiLimit),
			grpcMethod(service, "BatchLimit", h.BatchLimit),
			grpcMethod(service, "Settle", h.Settle),
			grpcMethod(service, "Acquire", h.Acquire),
			grpcMethod(service, "Release", h.Release),
			grpcMethod(service, "Extend", h.Extend),
			grpcMethod(service, "SetOverride", h.SetOverride),
			grpcMethod(service, "GetOverride", h.GetOverride),
			grpcMethod(service, "ListOverrides", h.ListOverrides),
			grpcMethod(service, "DeleteOverride", h.DeleteOverride),
			grpcMethod(service, "GetPenalty", h.GetPenalty),
			grpcMethod(service, "ListPenalties", h.ListPenalties),
			grpcMethod(service, "DeletePenalty", h.DeletePenalty),
		},
		Metadata: "ratelimit/v1/ratelimit.proto",
	}, struct{}{})
}

// RegisterGRPC serves KeyService on a grpc-go server of the layer.
func (h *Keys) RegisterGRPC(srv *grpc.Server) {
	const service = ratelimitv1connect.KeyServiceName
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			grpcMethod(service, "CreateKey", h.CreateKey),
			grpcMethod(service, "ListKeys", h.ListKeys),
			grpcMethod(service, "UpdateKey", h.UpdateKey),
			grpcMethod(service, "RevokeKey", h.RevokeKey),
		},
		Metadata: "ratelimit/v1/keys.proto",
	}, struct{}{})
}

// RegisterGRPC serves AuditService on a grpc-go server of the layer.
func (h *Audit) RegisterGRPC(srv *grpc.Server) {
	const service = ratelimitv1connect.AuditServiceName
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{grpcMethod(service, "ListAuditLog", h.ListAuditLog)},
		Metadata:    "ratelimit/v1/keys.proto",
	}, struct{}{})
}

// grpcMethod adapts one method of a Connect handler of service to grpc-go.
func grpcMethod[Req, Res any](service, name string, fn func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) grpc.MethodDesc {
	full := "/" + service + "/" + name
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

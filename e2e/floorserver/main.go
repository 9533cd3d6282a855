// Command floorserver serves the floors of BenchmarkFloors: on each
// transport the API serves, a handler that does no work, so that what a
// transport costs a call alone is measured beside the API on it, with the
// same client. It listens on three loopback ports and prints them as one
// line, "grpc=ADDR h2c=ADDR http=ADDR", then serves until killed:
//
//   - grpc: grpc-go, ratelimit.v1.RatelimitService/Limit decoding the
//     request and answering a fixed response (the API's grpc-go port);
//   - h2c: connect-go's RatelimitService on net/http (HTTP/1.1 and h2c),
//     Limit answering a fixed response: gRPC and Connect JSON (the API's
//     main port);
//   - http: net/http HTTP/1.1, any path: the body read whole and a fixed
//     JSON answer written (the Unkey v2 routes and Envoy's /json).
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
)

func main() {
	grpcLn, h2cLn, httpLn := listen(), listen(), listen()
	fmt.Printf("grpc=%s h2c=%s http=%s\n", grpcLn.Addr(), h2cLn.Addr(), httpLn.Addr())

	gs := grpc.NewServer()
	gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "ratelimit.v1.RatelimitService",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Limit", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req ratelimitv1.LimitRequest
			if err := dec(&req); err != nil {
				return nil, err
			}
			return &ratelimitv1.LimitResponse{Success: true, Limit: req.Limit, Remaining: req.Limit - 1}, nil
		}}},
	}, struct{}{})
	go func() { log.Fatal(gs.Serve(grpcLn)) }()

	mux := http.NewServeMux()
	mux.Handle(ratelimitv1connect.NewRatelimitServiceHandler(bare{}))
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	go func() { log.Fatal((&http.Server{Handler: mux, Protocols: &protocols}).Serve(h2cLn)) }()

	answer := []byte(`{"success":true,"limit":1099511627776,"remaining":1099511627775,"reset":0}`)
	log.Fatal(http.Serve(httpLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	})))
}

func listen() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	return ln
}

// bare is a RatelimitService whose Limit does no work.
type bare struct {
	ratelimitv1connect.UnimplementedRatelimitServiceHandler
}

func (bare) Limit(_ context.Context, req *connect.Request[ratelimitv1.LimitRequest]) (*connect.Response[ratelimitv1.LimitResponse], error) {
	return connect.NewResponse(&ratelimitv1.LimitResponse{Success: true, Limit: req.Msg.Limit, Remaining: req.Msg.Limit - 1}), nil
}

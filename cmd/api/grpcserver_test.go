package main

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
)

// TestGRPCPort: with UNKEY_GRPC_ADDR the service is served by grpc-go on a
// port of its own, to a grpc-go client: decisions shared with the main
// port, the token checked, batches bounded before decoding, health and
// reflection answered.
func TestGRPCPort(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a", "UNKEY_GRPC_ADDR=127.0.0.1:0")
	conn, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokA)
	limit := func(ctx context.Context, cost int64) (*ratelimitv1.LimitResponse, error) {
		out := new(ratelimitv1.LimitResponse)
		err := conn.Invoke(ctx, "/ratelimit.v1.RatelimitService/Limit",
			&ratelimitv1.LimitRequest{Namespace: "n", Identifier: "g", Limit: 3, Duration: 60_000, Cost: &cost}, out)
		return out, err
	}
	if _, err := limit(ctx, 1); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v, want unauthenticated", err)
	}
	if resp, err := limit(authed, 2); err != nil || !resp.Success || resp.Remaining != 1 {
		t.Fatalf("Limit over grpc-go: %v, %v", resp, err)
	}
	// The same counter as the main port's.
	if status, out := ts.call(t, "Limit", tokA, `{"namespace":"n","identifier":"g","limit":3,"duration":60000,"cost":0}`); status != 200 || out["remaining"] != "1" {
		t.Fatalf("the main port after a call on the gRPC port: %d %v", status, out)
	}
	if _, err := limit(authed, -1); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cost") {
		t.Fatalf("a negative cost: %v, want invalid_argument naming cost", err)
	}
	big := &ratelimitv1.BatchLimitRequest{}
	for range 1001 {
		big.Limits = append(big.Limits, &ratelimitv1.LimitRequest{})
	}
	if err := conn.Invoke(authed, "/ratelimit.v1.RatelimitService/BatchLimit", big, new(ratelimitv1.BatchLimitResponse)); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "must hold 1 to 1000 limits") {
		t.Fatalf("1,001 entries: %v, want invalid_argument", err)
	}
	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit.v1.RatelimitService"})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", hc, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil || !strings.Contains(r.String(), "ratelimit.v1.RatelimitService") {
		t.Fatalf("reflection's services: %v, %v", r, err)
	}
}

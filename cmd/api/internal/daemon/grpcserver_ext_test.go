package daemon_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
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

// grpcStream opens a gRPC stream to Limit on a raw h2c connection to addr,
// with token (none if ""), declaring a message of 1 MiB and sending none
// of it.
func grpcStream(t *testing.T, addr, token string) *h2Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	io.WriteString(conn, http2.ClientPreface)
	c := &h2Conn{conn: conn, fr: http2.NewFramer(conn, conn)}
	c.fr.WriteSettings()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	fields := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"},
		{":path", "/ratelimit.v1.RatelimitService/Limit"}, {"content-type", "application/grpc"}, {"te", "trailers"}}
	if token != "" {
		fields = append(fields, [2]string{"authorization", "Bearer " + token})
	}
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: buf.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	// The envelope of a 1 MiB message, and nothing of it.
	c.fr.WriteData(1, false, []byte{0, 0, 0x10, 0, 0})
	return c
}

// TestGRPCPortRefusesEarly: on the grpc-go port a stream without a token is
// refused at its headers, before its message is read (before: it was held,
// decoding what it sent, for as long as the client liked); an authenticated
// stream that stalls mid-message is ended within the read and write
// timeouts; and connections past UNKEY_GRPC_MAX_CONNECTIONS are not served.
func TestGRPCPortRefusesEarly(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a", "UNKEY_GRPC_ADDR=127.0.0.1:0",
		"UNKEY_HTTP_READ_TIMEOUT=300ms", "UNKEY_HTTP_WRITE_TIMEOUT=300ms", "UNKEY_GRPC_MAX_CONNECTIONS=3")
	anon := grpcStream(t, ts.grpcAddr, "")
	if !anon.waitStreamEnd(t, 1, 2*time.Second) {
		t.Fatal("a stream without a token was not refused at its headers")
	}
	anon.conn.Close()
	start := time.Now()
	stalled := grpcStream(t, ts.grpcAddr, tokA)
	if !stalled.waitStreamEnd(t, 1, 5*time.Second) {
		t.Fatal("an authenticated stream stalled mid-message was held past its deadline")
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Fatalf("the stalled stream ended after %v, before its deadline of 600 ms", took)
	}
	stalled.conn.Close()
	time.Sleep(100 * time.Millisecond) // the server sees both connections close
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ts.grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, http2.ClientPreface) // a client past its handshake
		http2.NewFramer(c, c).WriteSettings()
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", ts.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	io.WriteString(extra, http2.ClientPreface)
	http2.NewFramer(extra, extra).WriteSettings()
	extra.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, _ := extra.Read(make([]byte, 9)); n > 0 {
		t.Fatal("a connection past the cap of 3 was served")
	}
	held[0].Close() // one slot frees: the waiting connection is served
	extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := extra.Read(make([]byte, 9)); n == 0 {
		t.Fatalf("the waiting connection was not served once a slot freed: %v", err)
	}
}

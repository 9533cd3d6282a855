package daemon_test

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/internal/telemetry"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// collector is an OTLP receiver, over HTTP and gRPC, that keeps the spans
// it is sent.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (c *collector) add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
}

// Export implements OTLP over gRPC.
func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// ServeHTTP implements OTLP over HTTP (protobuf).
func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.add(&req)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// find returns a span that matches.
func (c *collector) find(match func(*tracepb.Span) bool) *tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if match(s) {
			return s
		}
	}
	return nil
}

func attrs(s *tracepb.Span) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes {
		out[kv.Key] = kv.Value.GetStringValue()
	}
	return out
}

// TestTracing: with OTEL_EXPORTER_OTLP_ENDPOINT set, every call is a span
// (on the main port and on grpc-go), the child of the caller's W3C
// traceparent, with its namespace, outcome and workspace and never its key;
// the background loops' Redis and MySQL calls are spans of their own.
// Exported over OTLP/HTTP and over OTLP/gRPC.
func TestTracing(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			c := &collector{}
			endpoint := httptest.NewServer(c).URL
			if protocol == "grpc" {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				srv := grpc.NewServer()
				coltracepb.RegisterTraceServiceServer(srv, c)
				go srv.Serve(ln)
				t.Cleanup(srv.Stop)
				endpoint = "http://" + ln.Addr().String()
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
			r := testserver.StartRedis(t)
			m := testserver.StartMariaDB(t)
			ts := startServer(t, "UNKEY_REDIS_URL="+r.URL(), "UNKEY_MYSQL_DSN="+m.DSN, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a",
				"UNKEY_GRPC_ADDR=127.0.0.1:0", "UNKEY_GLOBAL_SYNC_INTERVAL=100ms")

			const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			status, _ := ts.post(t, "/ratelimit.v1.RatelimitService/Limit", tokA, strings.NewReader(
				`{"namespace":"trace.ns","identifier":"u","limit":5,"duration":60000}`), "traceparent", "00-"+traceID+"-"+parentID+"-01")
			if status != 200 {
				t.Fatalf("Limit: %d", status)
			}
			const grpcParent = "00f067aa0ba902b8"
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tokA,
				"traceparent", "00-"+traceID+"-"+grpcParent+"-01")
			conn, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := conn.Invoke(ctx, "/ratelimit.v1.RatelimitService/Limit", &ratelimitv1.LimitRequest{Namespace: "trace.grpc",
				Identifier: "u", Limit: 1, Duration: 60000}, new(ratelimitv1.LimitResponse)); err != nil {
				t.Fatal(err)
			}
			childOf := func(parent string) func(*tracepb.Span) bool {
				return func(s *tracepb.Span) bool {
					return hex.EncodeToString(s.TraceId) == traceID && hex.EncodeToString(s.ParentSpanId) == parent
				}
			}
			var main, onGRPC *tracepb.Span
			poll.Until(t, 10*time.Second, "both calls' spans", func() bool {
				main, onGRPC = c.find(childOf(parentID)), c.find(childOf(grpcParent))
				return main != nil && onGRPC != nil
			})
			for _, tc := range []struct {
				span      *tracepb.Span
				namespace string
				system    string
			}{{main, "trace.ns", "connect"}, {onGRPC, "trace.grpc", "grpc"}} {
				a := attrs(tc.span)
				if tc.span.Name != "Limit" || tc.span.Kind != tracepb.Span_SPAN_KIND_SERVER || a["ratelimit.namespace"] != tc.namespace ||
					a["ratelimit.outcome"] != "passed" || a["ratelimit.workspace"] != "ws_a" || a["rpc.system"] != tc.system {
					t.Errorf("span %s: %v", tc.span.Name, a)
				}
				for k, v := range a {
					if strings.Contains(v, tokA) || strings.Contains(k, "authorization") {
						t.Errorf("span %s holds the key in %s", tc.span.Name, k)
					}
				}
			}
			for _, system := range []string{"redis", "mysql"} {
				poll.Until(t, 10*time.Second, "a span of a "+system+" call", func() bool {
					return c.find(func(s *tracepb.Span) bool {
						for k, v := range attrs(s) {
							if strings.HasPrefix(k, "db.system") && v == system {
								return true
							}
						}
						return false
					}) != nil
				})
			}
		})
	}
}

// TestTracingIsOffByDefault: without OTEL_TRACES_EXPORTER or an OTLP
// endpoint nothing is traced; "none" turns it off even with an endpoint.
func TestTracingIsOffByDefault(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, false},
	} {
		if got := telemetry.Enabled(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("%v: tracing %v, want %v", tc.env, got, tc.want)
		}
	}
}

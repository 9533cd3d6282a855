package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// bareHandler is a RatelimitService that does no work: the yardstick for the
// cost of Connect, HTTP and the loopback network alone.
type bareHandler struct {
	// The override RPCs are not measured.
	ratelimitv1connect.UnimplementedRatelimitServiceHandler
}

func (bareHandler) Limit(context.Context, *connect.Request[ratelimitv1.LimitRequest]) (*connect.Response[ratelimitv1.LimitResponse], error) {
	return connect.NewResponse(&ratelimitv1.LimitResponse{Success: true, Limit: 100, Remaining: 99}), nil
}

func (bareHandler) MultiLimit(context.Context, *connect.Request[ratelimitv1.MultiLimitRequest]) (*connect.Response[ratelimitv1.MultiLimitResponse], error) {
	return connect.NewResponse(&ratelimitv1.MultiLimitResponse{Passed: true}), nil
}

// serveBench serves h on a loopback port the way the API does (HTTP/1.1 and
// h2c) and returns its URL.
func serveBench(b *testing.B, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &protocols}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func benchClient(url, protocol string) ratelimitv1connect.RatelimitServiceClient {
	var protocols http.Protocols
	var opts []connect.ClientOption
	if protocol == "grpc" {
		protocols.SetUnencryptedHTTP2(true)
		opts = append(opts, connect.WithGRPC())
	} else {
		protocols.SetHTTP1(true)
		opts = append(opts, connect.WithProtoJSON())
	}
	hc := &http.Client{Transport: &http.Transport{Protocols: &protocols, MaxIdleConnsPerHost: 256}}
	return ratelimitv1connect.NewRatelimitServiceClient(hc, url, opts...)
}

// benchLimit sends Limit calls from 32 concurrent clients and reports
// requests per second and latency percentiles.
func benchLimit(b *testing.B, url, protocol string) {
	client := benchClient(url, protocol)
	var next atomic.Int64
	lat := make([]time.Duration, b.N)
	b.SetParallelism(16) // 32 goroutines on 2 cores
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			req := &ratelimitv1.LimitRequest{Namespace: "bench", Identifier: "user_" + strconv.Itoa(int(i%1000)), Limit: 1 << 40, Duration: 60_000}
			t0 := time.Now()
			if _, err := client.Limit(context.Background(), connect.NewRequest(req)); err != nil {
				b.Error(err)
				return
			}
			lat[i] = time.Since(t0)
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(lat[len(lat)*50/100].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func BenchmarkConnect(b *testing.B) {
	for _, protocol := range []string{"json", "grpc"} {
		b.Run("bare/"+protocol, func(b *testing.B) {
			mux := http.NewServeMux()
			mux.Handle(ratelimitv1connect.NewRatelimitServiceHandler(bareHandler{}))
			benchLimit(b, serveBench(b, mux), protocol)
		})
		b.Run("limit/"+protocol, func(b *testing.B) {
			benchServer(b, protocol, []string{"UNKEY_REGION=bench"})
		})
		b.Run("limit+tracing/"+protocol, func(b *testing.B) {
			// Every call a span, sampled, batched and exported over
			// OTLP/HTTP to a receiver that reads and drops them.
			sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
			}))
			b.Cleanup(sink.Close) // after the server's own clean-up: its last export
			b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
			b.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
			benchServer(b, protocol, []string{"UNKEY_REGION=bench"})
		})
		b.Run("batch100/"+protocol, func(b *testing.B) {
			benchServerWith(b, []string{"UNKEY_REGION=bench"}, func(url string) { benchBatch(b, url, protocol, 100) })
		})
		b.Run("limit+redis+mysql/"+protocol, func(b *testing.B) {
			r := testserver.StartRedis(b)
			m := testserver.StartMariaDB(b)
			benchServer(b, protocol, []string{"UNKEY_REGION=bench", "UNKEY_REDIS_URL=" + r.URL(), "UNKEY_MYSQL_DSN=" + m.DSN})
		})
	}
}

// benchServer benchmarks Limit calls to the real API server with the
// configuration in environ, its background loops running.
func benchServer(b *testing.B, protocol string, environ []string) {
	benchServerWith(b, environ, func(url string) { benchLimit(b, url, protocol) })
}

// benchServerWith starts the real API server with the configuration in
// environ and runs bench against its URL.
func benchServerWith(b *testing.B, environ []string, bench func(url string)) {
	cfg, err := daemon.LoadConfig(environ)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := daemon.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, nil) }()
	b.Cleanup(func() { cancel(); <-done })
	bench("http://" + ln.Addr().String())
}

// benchBatch sends BatchLimit calls of size independent requests from 32
// concurrent clients and reports decisions per second, in all and per core
// (client and server share the cores).
func benchBatch(b *testing.B, url, protocol string, size int) {
	client := benchClient(url, protocol)
	var next atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			req := &ratelimitv1.BatchLimitRequest{Limits: make([]*ratelimitv1.LimitRequest, size)}
			for j := range req.Limits {
				req.Limits[j] = &ratelimitv1.LimitRequest{Namespace: "bench", Identifier: "user_" + strconv.Itoa(int((i*int64(size)+int64(j))%1000)),
					Limit: 1 << 40, Duration: 60_000}
			}
			if _, err := client.BatchLimit(context.Background(), connect.NewRequest(req)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	perSecond := float64(b.N*size) / elapsed.Seconds()
	b.ReportMetric(perSecond, "decisions/s")
	b.ReportMetric(perSecond/float64(runtime.GOMAXPROCS(0)), "decisions/s/core")
}

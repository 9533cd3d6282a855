package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// peerRules is the rule both services of BenchmarkPeers enforce: a limit
// per user that never denies in a benchmark.
const peerRules = "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000000000}\n"

// BenchmarkPeers measures this service beside envoyproxy/ratelimit, the
// service Envoy Gateway deploys, on the calls both answer: Envoy's
// ShouldRateLimit over gRPC and its JSON form, /json, over HTTP/1.1. Each
// runs as a process of its own with a Redis of its own (fsync once a
// second, as a production Redis is run) and the same rule, called by the
// same client as BenchmarkFloors calls (about 32 concurrent calls, 1,000
// keys). server-µs/op is the service's CPU per call, store-µs/op its
// Redis's: envoyproxy/ratelimit asks Redis on every call, this service
// decides in memory and sends Redis its counts in batches, so the sum is
// the fair comparison.
//
// PEER_RATELIMIT names envoyproxy/ratelimit's binary (without it the
// benchmark is skipped: it is not a dependency of this repository). Build
// one from its repository with
//
//	CGO_ENABLED=0 go build -o /tmp/ratelimit ./src/service_cmd
//
// then run, three times (each run calls the four in turn; -count would
// repeat each one back to back)
//
//	PEER_RATELIMIT=/tmp/ratelimit go test -run '^$' -bench Peers -benchtime 40000x ./e2e
func BenchmarkPeers(b *testing.B) {
	binary := os.Getenv("PEER_RATELIMIT")
	if binary == "" {
		b.Skip("PEER_RATELIMIT names no envoyproxy/ratelimit binary")
	}
	ourRedis, peerRedis := testserver.StartRedisEverySec(b), testserver.StartRedisEverySec(b)
	api := startFloorAPI(b, "", "UNKEY_REDIS_URL="+ourRedis.URL())
	peer := startPeerRatelimit(b, binary, peerRedis.Addr)
	for _, c := range []struct {
		name   string
		server *exec.Cmd
		store  *testserver.Redis
		call   func(b *testing.B) func(i int64) error
	}{
		{"grpc/api-grpc-go-port", api.cmd, ourRedis, shouldRateLimitCaller(api.grpcAddr)},
		{"grpc/envoyproxy-ratelimit", peer.cmd, peerRedis, shouldRateLimitCaller(peer.grpcAddr)},
		{"http1-json/api", api.cmd, ourRedis, jsonCaller("http://"+api.addr+"/json", envoyBody)},
		{"http1-json/envoyproxy-ratelimit", peer.cmd, peerRedis, jsonCaller("http://"+peer.addr+"/json", envoyBody)},
	} {
		b.Run(c.name, func(b *testing.B) { measureCalls(b, c.call(b), c.server.Process.Pid, c.store.Pid()) })
	}
}

// startPeerRatelimit starts envoyproxy/ratelimit's binary with peerRules
// and the Redis at redisAddr, as Envoy Gateway configures it (TCP to
// Redis, statistics for Prometheus), and waits until it answers its health check.
func startPeerRatelimit(b *testing.B, binary, redisAddr string) *floorProcess {
	root := b.TempDir()
	config := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(config, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(config, "bench.yaml"), []byte(peerRules), 0o600); err != nil {
		b.Fatal(err)
	}
	port, grpcPort, debugPort, metricsPort := testserver.FreePort(b), testserver.FreePort(b), testserver.FreePort(b), testserver.FreePort(b)
	cmd := serverCommand("", binary)
	cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:"+strconv.Itoa(metricsPort), "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(port), "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debugPort))
	return startServing(b, cmd, port, grpcPort, "/healthcheck")
}

// shouldRateLimitCaller returns a caller of Envoy's ShouldRateLimit on
// addr over one grpc-go connection, with the API's token as Envoy sends
// one (the grpc_service's initial_metadata; envoyproxy/ratelimit ignores
// it).
func shouldRateLimitCaller(addr string) func(b *testing.B) func(i int64) error {
	return func(b *testing.B) func(i int64) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		client := rlsv3.NewRateLimitServiceClient(conn)
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+floorToken)
		return func(i int64) error {
			resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bench",
				Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
					{Key: "user", Value: "user_" + strconv.FormatInt(i%1000, 10)}}}}})
			if err != nil {
				return err
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit == nil {
				return fmt.Errorf("not admitted under the rule: %v", resp)
			}
			return nil
		}
	}
}

package daemon_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/unkeyed/ratelimit/internal/testkit/rlscall"
)

// quotaRules writes a rule file of domain "quota": a user may make 600
// requests a minute.
func quotaRules(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "quota.yaml"), []byte("domain: quota\ndescriptors:\n  - key: user\n"+
		"    rate_limit: {unit: minute, requests_per_unit: 600}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// quotaStream opens Envoy's quota stream to addr with token (none if
// empty), as Envoy's filter does: one gRPC stream, over HTTP/2.
func quotaStream(t *testing.T, addr, token string) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// quotaReport is a report of domain "quota" of user's bucket: allowed and
// denied requests in elapsed seconds.
func quotaReport(user string, elapsed time.Duration, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports {
	return &rlqsv3.RateLimitQuotaUsageReports{Domain: "quota", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"user": user}}, TimeElapsed: durationpb.New(elapsed),
		NumRequestsAllowed: allowed, NumRequestsDenied: denied}}}
}

// assigned sends rep on stream and returns the strategy and time to live
// of the assignment that answers it.
func assigned(t *testing.T, stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, rep *rlqsv3.RateLimitQuotaUsageReports) (*typev3.RateLimitStrategy, time.Duration) {
	t.Helper()
	if err := stream.Send(rep); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	q := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
	return q.GetRateLimitStrategy(), q.GetAssignmentTimeToLive().AsDuration()
}

// TestRLQSOnBothPorts: Envoy's quota service on the main port and the
// grpc-go port: a stream without a key is refused, and one with a key
// that sends nothing is ended within the read timeout, one whose bucket
// breaks the rules' bounds with invalid_argument naming it; a keyed one is
// assigned a token bucket, outlives the read and write timeouts that
// bound every other call, and counts its reports in the cells the rate
// limit service decides (a window spent through one port is DENY_ALL on
// the other, and OVER_LIMIT to ShouldRateLimit); another workspace's
// bucket of the same name is its own; and a stopping server expires
// every assignment before it ends the streams.
func TestRLQSOnBothPorts(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a,"+tokB+"=ws_b", "UNKEY_GRPC_ADDR=127.0.0.1:0",
		"UNKEY_RLS_CONFIG="+quotaRules(t), "UNKEY_HTTP_READ_TIMEOUT=300ms", "UNKEY_HTTP_WRITE_TIMEOUT=300ms")
	mainAddr := strings.TrimPrefix(ts.url, "http://")
	for name, addr := range map[string]string{"main": mainAddr, "grpc-go": ts.grpcAddr} {
		anon := quotaStream(t, addr, "")
		anon.Send(quotaReport("x", 0, 0, 0))
		if _, err := anon.Recv(); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s port, no key: %v, want unauthenticated", name, err)
		}
	}
	for name, addr := range map[string]string{"main": mainAddr, "grpc-go": ts.grpcAddr} {
		silent := quotaStream(t, addr, tokA)
		start := time.Now()
		if _, err := silent.Recv(); err == nil || time.Since(start) > 5*time.Second {
			t.Fatalf("%s port, a stream that sends nothing: %v after %v, want it ended within the read timeout", name, err, time.Since(start))
		}
	}
	for name, addr := range map[string]string{"main": mainAddr, "grpc-go": ts.grpcAddr} {
		bad := quotaStream(t, addr, tokA)
		bad.Send(quotaReport(strings.Repeat("x", 2000), 0, 0, 0))
		if _, err := bad.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `.bucket["user"]: key and value must be at most 1024 bytes`) {
			t.Fatalf("%s port, a bucket value of 2,000 bytes: %v, want invalid_argument naming it", name, err)
		}
	}
	main, other := quotaStream(t, mainAddr, tokA), quotaStream(t, ts.grpcAddr, tokA)
	if s, ttl := assigned(t, main, quotaReport("alice", 0, 0, 0)); s.GetTokenBucket() == nil || ttl < time.Second {
		t.Fatalf("a new bucket on the main port: %v for %v, want a token bucket", s, ttl)
	}
	if s, _ := assigned(t, other, quotaReport("alice", 0, 0, 0)); s.GetTokenBucket() == nil {
		t.Fatalf("the same bucket on the grpc-go port: %v, want a token bucket", s)
	}
	time.Sleep(time.Second) // past the 600 ms any other call gets
	if s, ttl := assigned(t, main, quotaReport("alice", time.Second, 600, 0)); s.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL || ttl < time.Second || ttl > time.Minute {
		t.Fatalf("the report that spent 600 of 600: %v for %v, want DENY_ALL until the reset", s, ttl)
	}
	// Pushed to the grpc-go port's stream at once, without its report.
	resp, err := other.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy(); s.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
		t.Fatalf("pushed to the other port's Envoy: %v, want DENY_ALL", resp)
	}
	rls := rlscall.Client(t, ts.grpcAddr)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tokA)
	out, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "quota",
		Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("user", "alice")}})
	if err != nil || out.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("ShouldRateLimit after the reports: %v, %v; want OVER_LIMIT", out, err)
	}
	b := quotaStream(t, ts.grpcAddr, tokB)
	if s, _ := assigned(t, b, quotaReport("alice", 0, 0, 0)); s.GetTokenBucket() == nil {
		t.Fatalf("workspace b's alice: %v, want a token bucket of its own", s)
	}
	closed := make(chan error, 1)
	go func() { closed <- ts.close() }()
	for name, stream := range map[string]rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient{"main": main, "grpc-go": b} {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s port, stopping: %v, want the assignments expired", name, err)
		}
		if ttl := resp.BucketAction[0].GetQuotaAssignmentAction().GetAssignmentTimeToLive(); ttl == nil || ttl.AsDuration() != 0 {
			t.Fatalf("%s port, stopping: %v, want a time to live of 0", name, resp)
		}
		if _, err := stream.Recv(); err != io.EOF {
			t.Fatalf("%s port, after the expiry: %v, want the stream ended", name, err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatalf("stop: %v", err)
	}
}

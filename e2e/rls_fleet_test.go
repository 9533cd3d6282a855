package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/rlscall"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// writeRLSConfig writes one config file and returns its directory.
func writeRLSConfig(t *testing.T, yaml string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRLSTwoRegions: two regions on one MariaDB, each a real API server, an
// hour limit of 10 per user. What one region spent reaches the other, which
// then admits only what is left: one limit across the regions, without a
// shared Redis.
func TestRLSTwoRegions(t *testing.T) {
	t.Parallel()
	m, _ := dbtest.Start(t)
	dir := writeRLSConfig(t, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	env := []string{"UNKEY_RLS_CONFIG=" + dir, "UNKEY_MYSQL_DSN=" + m.DSN, "UNKEY_GLOBAL_FLUSH_INTERVAL=100ms",
		"UNKEY_GLOBAL_FULL_FLUSH_INTERVAL=100ms", "UNKEY_GLOBAL_SYNC_INTERVAL=100ms"}
	a := startServer(t, append(env, "UNKEY_REGION=eu")...)
	b := startServer(t, append(env, "UNKEY_REGION=us")...)
	ca := rlscall.Client(t, strings.TrimPrefix(a.url, "http://"))
	cb := rlscall.Client(t, strings.TrimPrefix(b.url, "http://"))
	ask := func(c rlsv3.RateLimitServiceClient, hits uint64) rlsStatus {
		t.Helper()
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api",
			Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.WithHits(rlscall.Desc("user", "alice"), hits)}})
		if err != nil {
			t.Fatal(err)
		}
		return statusOf(resp.Statuses[0])
	}
	if got := ask(ca, 6); got != (rlsStatus{false, 10, "HOUR", 4}) {
		t.Fatalf("region eu spends 6: %+v", got)
	}
	start := time.Now()
	poll.Until(t, 10*time.Second, "region us to see what eu spent", func() bool { return ask(cb, 0).Remaining == 4 })
	t.Logf("region us saw eu's 6 hits after %v", time.Since(start).Round(time.Millisecond))
	admitted := 0
	for range 6 {
		if !ask(cb, 1).Over {
			admitted++
		}
	}
	if admitted != 4 {
		t.Fatalf("region us admitted %d of 6 after eu spent 6 of 10, want 4", admitted)
	}
}

// TestRLSRedisDownUnderLoad: the region's Redis killed, then frozen (a
// server that takes connections and never answers, the case that stalls
// envoyproxy/ratelimit for seconds per request), under load from eight
// gRPC clients. Every call is answered in time (a one-second deadline per
// call, fifty times Envoy's default timeout of 20 ms), decided from the
// process's memory while Redis is away.
func TestRLSRedisDownUnderLoad(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	dir := writeRLSConfig(t, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n")
	ts := startServer(t, "UNKEY_RLS_CONFIG="+dir, "UNKEY_REDIS_URL="+r.URL(), "UNKEY_GRPC_ADDR=127.0.0.1:0")
	client := rlscall.Client(t, ts.grpcAddr)
	for _, fault := range []struct {
		name        string
		break_, fix func()
	}{
		{"killed", r.Kill, r.Start},
		{"frozen", r.Freeze, r.Thaw},
	} {
		t.Run(fault.name, func(t *testing.T) {
			var mu sync.Mutex
			var latencies []time.Duration
			failed := 0
			done := make(chan struct{})
			var clients sync.WaitGroup
			for c := range 8 {
				clients.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-done:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), time.Second)
						began := time.Now()
						_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api",
							Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("user", "u"+strconv.Itoa((c*7+i)%50))}})
						took := time.Since(began)
						cancel()
						mu.Lock()
						latencies = append(latencies, took)
						if err != nil {
							failed++
						}
						mu.Unlock()
					}
				})
			}
			time.Sleep(300 * time.Millisecond)
			fault.break_()
			time.Sleep(2 * time.Second)
			fault.fix()
			time.Sleep(300 * time.Millisecond)
			close(done)
			clients.Wait()
			sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
			n := len(latencies)
			t.Logf("Redis %s for 2 s: %d calls, %d failed, p50 %v, p99 %v, max %v", fault.name, n, failed,
				latencies[n/2], latencies[n*99/100], latencies[n-1])
			if failed > 0 || n < 100 {
				t.Fatalf("%d of %d calls failed or missed their deadline with Redis %s", failed, n, fault.name)
			}
		})
	}
}

// rlsStatus is rlscall.Status, for the tables of this file.
type rlsStatus rlscall.Status

func statusOf(s *rlsv3.RateLimitResponse_DescriptorStatus) rlsStatus {
	return rlsStatus(rlscall.StatusOf(s))
}

// TestRLSBucketNegativeHitsAcrossTheFleet: a token bucket rule of 10 an
// hour, two API processes on one real Redis, and a third in another
// region on a real MariaDB. One process of the region spends the whole
// bucket; Envoy's negative hits for all 10 reach the other process (its
// replicas share no connection); the first then admits 10 again, and so
// does the other region, once each (before, a bucket's give-back stayed
// in the process that took the call: neither admitted any).
func TestRLSBucketNegativeHitsAcrossTheFleet(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	m, _ := dbtest.Start(t)
	dir := writeRLSConfig(t, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket}\n")
	env := []string{"UNKEY_RLS_CONFIG=" + dir, "UNKEY_MYSQL_DSN=" + m.DSN, "UNKEY_GLOBAL_FLUSH_INTERVAL=100ms",
		"UNKEY_GLOBAL_FULL_FLUSH_INTERVAL=100ms", "UNKEY_GLOBAL_SYNC_INTERVAL=100ms"}
	a := startServer(t, append(env, "UNKEY_REGION=eu", "UNKEY_REDIS_URL="+r.URL())...)
	b := startServer(t, append(env, "UNKEY_REGION=eu", "UNKEY_REDIS_URL="+r.URL())...)
	us := startServer(t, append(env, "UNKEY_REGION=us")...)
	clients := map[string]rlsv3.RateLimitServiceClient{}
	for name, s := range map[string]*testServer{"eu-a": a, "eu-b": b, "us": us} {
		clients[name] = rlscall.Client(t, strings.TrimPrefix(s.url, "http://"))
	}
	send := func(name string, hits uint64, negative bool) rlsStatus {
		t.Helper()
		d := rlscall.WithHits(rlscall.Desc("user", "alice"), hits)
		d.IsNegativeHits = negative
		resp, err := clients[name].ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api",
			Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return statusOf(resp.Statuses[0])
	}
	if got := send("eu-a", 10, false); got.Over || got.Remaining != 0 {
		t.Fatalf("eu-a spends the bucket's 10: %+v", got)
	}
	for _, name := range []string{"eu-b", "us"} {
		poll.Until(t, 10*time.Second, name+" to see the bucket spent", func() bool { return send(name, 0, false).Remaining == 0 })
	}
	if got := send("eu-b", 10, true); got.Over {
		t.Fatalf("eu-b's negative hits: %+v", got)
	}
	for _, name := range []string{"eu-a", "us"} {
		start := time.Now()
		poll.Until(t, 10*time.Second, name+" to see the 10 given back", func() bool { return send(name, 0, false).Remaining == 10 })
		t.Logf("%s saw the 10 given back after %v", name, time.Since(start).Round(time.Millisecond))
	}
	admitted := 0
	for range 11 {
		if !send("eu-a", 1, false).Over {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("eu-a admitted %d of 11 after 10 were given back, want 10", admitted)
	}
}

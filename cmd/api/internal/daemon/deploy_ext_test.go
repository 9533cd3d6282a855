package daemon_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// metricName is a metric a rule or a dashboard panel names.
var metricName = regexp.MustCompile(`unkey_[a-z0-9_]+`)

// deployedMetrics returns the metrics deploy/prometheus and deploy/grafana
// name, without a histogram's _bucket, _sum and _count, but for those of
// the worker (prefix unkey_worker_), which cmd/worker checks.
func deployedMetrics(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("..", "..", "..", "..", "deploy", "prometheus", "*.rules.yaml"))
	dashboards, _ := filepath.Glob(filepath.Join("..", "..", "..", "..", "deploy", "grafana", "*.json"))
	files = append(files, dashboards...)
	if len(files) < 2 {
		t.Fatalf("deploy files: %v", files)
	}
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range metricName.FindAllString(string(data), -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
			}
			if !strings.HasPrefix(name, "unkey_worker_") && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}

// TestDeployedMetricsAreServed: every metric the alerting rules and the
// Grafana dashboard name is served by a running API process with every
// store and source configured (Redis, MySQL, rules, a keys file, TLS), so
// that no alert watches a metric that does not exist.
func TestDeployedMetricsAreServed(t *testing.T) {
	t.Parallel()
	names := deployedMetrics(t)
	r := testserver.StartRedis(t)
	m := testserver.StartMariaDB(t)
	dir := t.TempDir()
	ca := testserver.NewCA(t)
	certFile, keyFile := ca.Issue(t, dir, 1, false)
	rules := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 1}}\n"), 0o644)
	_, _, entry := cliKey(t, nil, "generate", "--workspace", "ws", "--name", "n", "--permissions", "ratelimit.*.limit")
	keysFile := filepath.Join(dir, "keys.json")
	os.WriteFile(keysFile, []byte(`{"keys":[`+strings.SplitN(entry, "\n", 2)[0]+`]}`), 0o600)
	ts := startServer(t, "UNKEY_REDIS_URL="+r.URL(), "UNKEY_MYSQL_DSN="+m.DSN, "UNKEY_RLS_CONFIG="+rules, "UNKEY_GRPC_ADDR=127.0.0.1:0",
		"UNKEY_AUTH_TOKENS="+tokA+"=ws_a", "UNKEY_AUTH_KEYS_FILE="+keysFile, "UNKEY_TLS_CERT_FILE="+certFile, "UNKEY_TLS_KEY_FILE="+keyFile,
		"UNKEY_GLOBAL_SYNC_INTERVAL=100ms")
	// Traffic, so that labelled metrics have their series.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	conn, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tokA)
	for range 3 {
		if _, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	served := map[string]bool{}
	var missing []string
	for range 100 { // the first global sync and the Redis calls come within a second
		families, err := ts.srv.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			served[f.GetName()] = true
		}
		missing = missing[:0]
		for _, n := range names {
			if !served[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			break
		}
		time.Sleep(poll.Interval)
	}
	if len(missing) > 0 {
		t.Fatalf("deploy/ names metrics no process serves: %v", missing)
	}
	t.Logf("%d metrics named by deploy/, all served", len(names))
}

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
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

	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// TestDeployedMetricsAreServed: every metric the alerting rules and the
// Grafana dashboard in deploy/ name is served on /metrics by a running
// process of the binary it belongs to: the worker's (unkey_worker_*) by a
// worker, every other by an API with every store and source configured
// (Redis, MySQL, rules, a keys file, TLS) after some traffic, so that no
// alert watches a metric that does not exist.
func TestDeployedMetricsAreServed(t *testing.T) {
	t.Parallel()
	var apiMetrics, worker []string
	for _, name := range deployedMetrics(t) {
		if strings.HasPrefix(name, "unkey_worker_") {
			worker = append(worker, name)
		} else {
			apiMetrics = append(apiMetrics, name)
		}
	}
	if len(worker) == 0 || len(apiMetrics) == 0 {
		t.Fatalf("deploy/ names API metrics %v and worker metrics %v: an alert is gone", apiMetrics, worker)
	}
	m := testserver.StartMariaDB(t)

	// The worker serves its metrics whether or not restate-server answers.
	w := &proc{t: t, name: "worker", log: filepath.Join(t.TempDir(), "worker.log")}
	w.startOnFreePort(func(port int) []string {
		return []string{"UNKEY_MYSQL_DSN=" + m.DSN, fmt.Sprint("UNKEY_WORKER_ADDR=127.0.0.1:", port),
			fmt.Sprint("UNKEY_RESTATE_ADMIN_URL=http://127.0.0.1:", testserver.FreePort(t)),
			fmt.Sprint("UNKEY_RESTATE_INGRESS_URL=http://127.0.0.1:", testserver.FreePort(t))}
	})
	t.Cleanup(w.kill)
	waitServed(t, "the worker", http.DefaultClient, fmt.Sprint("http://127.0.0.1:", w.port, "/metrics"), worker)

	r := testserver.StartRedis(t)
	dir := t.TempDir()
	ca := testserver.NewCA(t)
	certFile, keyFile := ca.Issue(t, dir, 1, false)
	rules := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 1}}\n"), 0o644)
	entry, err := exec.Command(filepath.Join(bin, "api"), "keys", "generate", "--workspace", "ws", "--name", "n",
		"--permissions", "ratelimit.*.limit").Output()
	if err != nil {
		t.Fatalf("api keys generate: %v", err)
	}
	keysFile := filepath.Join(dir, "keys.json")
	os.WriteFile(keysFile, []byte(`{"keys":[`+strings.SplitN(string(entry), "\n", 2)[0]+`]}`), 0o600)
	const token = "tok_deploy_0123456789"
	httpAddr, grpcAddr := fmt.Sprint("127.0.0.1:", testserver.FreePort(t)), fmt.Sprint("127.0.0.1:", testserver.FreePort(t))
	metricsAddr := fmt.Sprint("127.0.0.1:", testserver.FreePort(t)) // as the chart serves them: on their own port
	// Over TLS, which proc's readiness check does not speak: started here.
	api := exec.Command(filepath.Join(bin, "api"))
	api.Env = []string{"UNKEY_REGION=deploy", "UNKEY_HTTP_ADDR=" + httpAddr, "UNKEY_GRPC_ADDR=" + grpcAddr,
		"UNKEY_REDIS_URL=" + r.URL(), "UNKEY_MYSQL_DSN=" + m.DSN, "UNKEY_RLS_CONFIG=" + rules,
		"UNKEY_AUTH_TOKENS=" + token + "=ws_a", "UNKEY_AUTH_KEYS_FILE=" + keysFile, "UNKEY_TLS_CERT_FILE=" + certFile, "UNKEY_TLS_KEY_FILE=" + keyFile,
		"UNKEY_GLOBAL_SYNC_INTERVAL=100ms", "UNKEY_METRICS_ADDR=" + metricsAddr}
	if err := api.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.Process.Kill(); api.Wait() })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	tlsConfig := &tls.Config{RootCAs: pool}
	https := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	poll.Until(t, 10*time.Second, "the API to report ready", func() bool {
		resp, err := https.Get("https://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	// Traffic, so that labelled metrics have their series.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	for range 3 {
		if _, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	waitServed(t, "the API", http.DefaultClient, "http://"+metricsAddr+"/metrics", apiMetrics)
	t.Logf("%d metrics named by deploy/, all served", len(apiMetrics)+len(worker))
}

// deployedMetrics returns the metrics deploy/prometheus and deploy/grafana
// name, without a histogram's _bucket, _sum and _count.
func deployedMetrics(t *testing.T) []string {
	t.Helper()
	root := charttest.Root()
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "prometheus", "*.rules.yaml"))
	dashboards, _ := filepath.Glob(filepath.Join(root, "deploy", "grafana", "*.json"))
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
		for _, name := range regexp.MustCompile(`unkey_[a-z0-9_]+`).FindAllString(string(data), -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
			}
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}

// waitServed waits until url's metrics name every one of want (the first
// global sync and the Redis calls come within a second of traffic).
func waitServed(t *testing.T, what string, client *http.Client, url string, want []string) {
	t.Helper()
	var missing []string
	ok := poll.Within(30*time.Second, func() bool {
		served := map[string]bool{}
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
				served[f[2]] = true
			}
		}
		missing = missing[:0]
		for _, n := range want {
			if !served[n] {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0
	})
	if !ok {
		t.Fatalf("deploy/ names metrics %s does not serve: %v", what, missing)
	}
}

package daemon_test

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// TestChartRunsTheAPI holds the Helm chart's API Deployment, rendered with
// the minimal and the full values, against this binary: every variable it
// sets is one loadConfig reads, and loads; its ports are the addresses it
// sets; its probes are routes the server answers; the graceful stop covers
// the drain and the final flush; the container runs as non-root on a
// read-only root with no capabilities. A release without a region does not
// render, and the region is the first thing it is refused for: with no
// values at all, and with a worker missing its own values too.
func TestChartRunsTheAPI(t *testing.T) {
	t.Parallel()
	renders := charttest.Renders(t)
	for _, name := range []string{"no-region", "bare"} {
		if e := renders[name].Error; !strings.Contains(e, "region is required") {
			t.Errorf("%s: %q, want it refused naming region", name, e)
		}
	}
	reads := charttest.EnvNames(daemon.Config{})
	secrets := map[string]string{"UNKEY_REDIS_URL": "redis://redis:6379", "UNKEY_MYSQL_DSN": "u:p@tcp(mysql:3306)/ratelimit",
		"UNKEY_AUTH_TOKENS": "tok_0123456789abcdef=ws_1", "UNKEY_RESERVATION_SECRET": strings.Repeat("x", 32)}
	for _, name := range []string{"minimal", "full"} {
		r := renders[name]
		c, ok := r.Containers["rl-ratelimit-api/api"]
		if !ok {
			t.Fatalf("%s: no api container in %v", name, r.Containers)
		}
		for env := range c.Env {
			if !reads[env] {
				t.Errorf("%s: the chart sets %s, which the API does not read", name, env)
			}
		}
		cfg, err := daemon.LoadConfig(charttest.Environ(c, secrets))
		if err != nil {
			t.Errorf("%s: the chart's environment does not load: %v", name, err)
			continue
		}
		if port(t, cfg.HTTPAddr) != c.Ports["http"] {
			t.Errorf("%s: container port http %d, UNKEY_HTTP_ADDR %s", name, c.Ports["http"], cfg.HTTPAddr)
		}
		if cfg.GRPCAddr == "" || port(t, cfg.GRPCAddr) != c.Ports["grpc"] {
			t.Errorf("%s: container port grpc %d, UNKEY_GRPC_ADDR %q", name, c.Ports["grpc"], cfg.GRPCAddr)
		}
		scheme := "HTTP"
		if cfg.TLSCertFile != "" {
			scheme = "HTTPS"
			if c.Mounts["/etc/ratelimit/tls"] != "secret:ratelimit-tls" || !strings.HasPrefix(cfg.TLSCertFile, "/etc/ratelimit/tls/") {
				t.Errorf("%s: TLS files %s from mounts %v", name, cfg.TLSCertFile, c.Mounts)
			}
		}
		if c.Probes["readiness"] != scheme+" /readyz http" || c.Probes["liveness"] != scheme+" /healthz http" {
			t.Errorf("%s: probes %v", name, c.Probes)
		}
		if cfg.RLSConfig != "" && c.Mounts[cfg.RLSConfig] != "configMap:rl-ratelimit-rls" {
			t.Errorf("%s: UNKEY_RLS_CONFIG %s is not the rules ConfigMap's mount (%v)", name, cfg.RLSConfig, c.Mounts)
		}
		if cfg.AuthKeysFile != "" && c.Mounts["/etc/ratelimit/keys"] != "secret:ratelimit-keys" {
			t.Errorf("%s: UNKEY_AUTH_KEYS_FILE %s is not the keys Secret's mount (%v)", name, cfg.AuthKeysFile, c.Mounts)
		}
		if !c.NonRoot || !c.ReadOnlyRoot || !c.NoCapabilities || !c.PreStop {
			t.Errorf("%s: non-root %v, read-only root %v, no capabilities %v, preStop %v", name, c.NonRoot, c.ReadOnlyRoot, c.NoCapabilities, c.PreStop)
		}
		// The stop: the drain of in-flight calls, then the last flush, with
		// room to connect.
		if need := daemon.ShutdownTimeout + ratelimit.DefaultGlobalFlushTimeout + 5*time.Second; time.Duration(r.Grace["rl-ratelimit-api"])*time.Second < need {
			t.Errorf("%s: terminationGracePeriodSeconds %d under %v", name, r.Grace["rl-ratelimit-api"], need)
		}
		for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"} {
			if r.Kinds[kind] == 0 {
				t.Errorf("%s: no %s in %v", name, kind, r.Kinds)
			}
		}
	}
	if k := renders["full"].Kinds; k["ServiceMonitor"] != 1 || k["ConfigMap"] != 1 {
		t.Errorf("full values: %v, want a ServiceMonitor and the rules' ConfigMap", k)
	}
	// The probes' routes are this server's.
	ts := startServer(t)
	for _, path := range []string{"/readyz", "/healthz", "/metrics"} {
		resp, err := http.Get(ts.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
	}
}

func port(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, _ := strconv.Atoi(p)
	return int32(n)
}

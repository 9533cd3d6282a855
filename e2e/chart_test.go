package e2e

import (
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
)

// TestChart holds the Helm chart, rendered with the minimal and the full
// values, against the two binaries. The API's Deployment: every variable it
// sets is one `api --help` lists, and `api config check` loads the
// environment; its ports are the addresses it sets; its probes are routes
// the API answers; its grace period outlasts the stop `api config check`
// reports; the container runs as non-root on a read-only root with no
// capabilities. The worker's, when enabled: the same of `worker`, its port
// UNKEY_WORKER_ADDR's and the URL it registers its Service. A release
// without a region does not render, and the region is the first thing it is
// refused for: with no values at all, and with a worker missing its own
// values too.
func TestChart(t *testing.T) {
	t.Parallel()
	renders := charttest.Renders(t)
	for _, name := range []string{"no-region", "bare"} {
		if e := renders[name].Error; !strings.Contains(e, "region is required") {
			t.Errorf("%s: %q, want it refused naming region", name, e)
		}
	}
	api := settings(t, "api")
	secrets := map[string]string{"UNKEY_REDIS_URL": "redis://redis:6379", "UNKEY_MYSQL_DSN": "u:p@tcp(mysql:3306)/ratelimit",
		"UNKEY_AUTH_TOKENS": "tok_0123456789abcdef=ws_1", "UNKEY_RESERVATION_SECRET": strings.Repeat("x", 32)}
	for _, name := range []string{"minimal", "full"} {
		r := renders[name]
		c, ok := r.Containers["rl-ratelimit-api/api"]
		if !ok {
			t.Fatalf("%s: no api container in %v", name, r.Containers)
		}
		for env := range c.Env {
			if _, ok := api[env]; !ok {
				t.Errorf("%s: the chart sets %s, which the API does not read", name, env)
			}
		}
		environ := charttest.Environ(c, secrets)
		out, err := configCheck(t, "api", environ)
		if err != nil {
			t.Errorf("%s: the chart's environment does not load: %v\n%s", name, err, out)
			continue
		}
		cfg := newLoaded(environ, api)
		if port(t, cfg.get("UNKEY_HTTP_ADDR")) != c.Ports["http"] {
			t.Errorf("%s: container port http %d, UNKEY_HTTP_ADDR %s", name, c.Ports["http"], cfg.get("UNKEY_HTTP_ADDR"))
		}
		if cfg.get("UNKEY_GRPC_ADDR") == "" || port(t, cfg.get("UNKEY_GRPC_ADDR")) != c.Ports["grpc"] {
			t.Errorf("%s: container port grpc %d, UNKEY_GRPC_ADDR %q", name, c.Ports["grpc"], cfg.get("UNKEY_GRPC_ADDR"))
		}
		scheme := "HTTP"
		if cert := cfg.get("UNKEY_TLS_CERT_FILE"); cert != "" {
			scheme = "HTTPS"
			if c.Mounts["/etc/ratelimit/tls"] != "secret:ratelimit-tls" || !strings.HasPrefix(cert, "/etc/ratelimit/tls/") {
				t.Errorf("%s: TLS files %s from mounts %v", name, cert, c.Mounts)
			}
		}
		if c.Probes["readiness"] != scheme+" /readyz http" || c.Probes["liveness"] != scheme+" /healthz http" {
			t.Errorf("%s: probes %v", name, c.Probes)
		}
		if rules := cfg.get("UNKEY_RLS_CONFIG"); rules != "" && c.Mounts[rules] != "configMap:rl-ratelimit-rls" {
			t.Errorf("%s: UNKEY_RLS_CONFIG %s is not the rules ConfigMap's mount (%v)", name, rules, c.Mounts)
		}
		if keys := cfg.get("UNKEY_AUTH_KEYS_FILE"); keys != "" && c.Mounts["/etc/ratelimit/keys"] != "secret:ratelimit-keys" {
			t.Errorf("%s: UNKEY_AUTH_KEYS_FILE %s is not the keys Secret's mount (%v)", name, keys, c.Mounts)
		}
		if !c.NonRoot || !c.ReadOnlyRoot || !c.NoCapabilities || !c.PreStop {
			t.Errorf("%s: non-root %v, read-only root %v, no capabilities %v, preStop %v", name, c.NonRoot, c.ReadOnlyRoot, c.NoCapabilities, c.PreStop)
		}
		// The stop (the drain of in-flight calls, the last replay and
		// flush), with room to connect.
		if stop := stopBudget(t, out); time.Duration(r.Grace["rl-ratelimit-api"])*time.Second < stop+5*time.Second {
			t.Errorf("%s: terminationGracePeriodSeconds %d under the stop's %v and 5 s", name, r.Grace["rl-ratelimit-api"], stop)
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
	probeRoutes(t)

	worker := settings(t, "worker")
	if _, ok := renders["minimal"].Containers["rl-ratelimit-worker/worker"]; ok {
		t.Errorf("minimal values: a worker, which is off unless enabled")
	}
	c, ok := renders["full"].Containers["rl-ratelimit-worker/worker"]
	if !ok {
		t.Fatalf("full: no worker container in %v", renders["full"].Containers)
	}
	for env := range c.Env {
		if _, ok := worker[env]; !ok {
			t.Errorf("full: the chart sets %s, which the worker does not read", env)
		}
	}
	environ := charttest.Environ(c, map[string]string{"UNKEY_MYSQL_DSN": "u:p@tcp(mysql:3306)/ratelimit"})
	if out, err := configCheck(t, "worker", environ); err != nil {
		t.Fatalf("full: the chart's environment does not load in the worker: %v\n%s", err, out)
	}
	cfg := newLoaded(environ, worker)
	_, p, _ := net.SplitHostPort(cfg.get("UNKEY_WORKER_ADDR"))
	if n, _ := strconv.Atoi(p); int32(n) != c.Ports["restate"] || !strings.HasSuffix(cfg.get("UNKEY_WORKER_URL"), ".svc:"+p) {
		t.Errorf("full: port %d, UNKEY_WORKER_ADDR %s, UNKEY_WORKER_URL %s", c.Ports["restate"], cfg.get("UNKEY_WORKER_ADDR"), cfg.get("UNKEY_WORKER_URL"))
	}
	if c.Probes["readiness"] != "TCP restate" || !c.NonRoot || !c.ReadOnlyRoot || !c.NoCapabilities {
		t.Errorf("full: worker probes %v, non-root %v, read-only %v, no capabilities %v", c.Probes, c.NonRoot, c.ReadOnlyRoot, c.NoCapabilities)
	}
}

// stopBudget reads the longest graceful stop off `api config check`.
func stopBudget(t *testing.T, out string) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`a graceful stop takes at most (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("api config check does not say how long a stop takes: %q", out)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// probeRoutes: the routes the chart's probes and ServiceMonitor use are the
// API's, on the binary.
func probeRoutes(t *testing.T) {
	t.Helper()
	ts := startServer(t, "UNKEY_REGION=chart")
	for _, path := range []string{"/readyz", "/healthz", "/metrics"} {
		if status := get(ts.url + path); status != http.StatusOK {
			t.Errorf("GET %s: %d", path, status)
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

package main

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
)

// TestChartRunsTheWorker holds the Helm chart's worker Deployment against
// this binary: every variable it sets is one loadConfig reads, and loads;
// its port is UNKEY_WORKER_ADDR's; the URL it registers with restate-server
// is its Service; it runs as non-root on a read-only root. The worker is
// off unless enabled (the full values enable it, the minimal ones do not).
func TestChartRunsTheWorker(t *testing.T) {
	reads := charttest.EnvNames(config{})
	renders := charttest.Renders(t)
	if _, ok := renders["minimal"].Containers["rl-ratelimit-worker/worker"]; ok {
		t.Errorf("minimal values: a worker, which is off unless enabled")
	}
	for _, name := range []string{"full"} {
		r := renders[name]
		c, ok := r.Containers["rl-ratelimit-worker/worker"]
		if !ok {
			t.Fatalf("%s: no worker container in %v", name, r.Containers)
		}
		for env := range c.Env {
			if !reads[env] {
				t.Errorf("%s: the chart sets %s, which the worker does not read", name, env)
			}
		}
		cfg, err := loadConfig(charttest.Environ(c, map[string]string{"UNKEY_MYSQL_DSN": "u:p@tcp(mysql:3306)/ratelimit"}))
		if err != nil {
			t.Errorf("%s: the chart's environment does not load: %v", name, err)
			continue
		}
		_, p, _ := net.SplitHostPort(cfg.WorkerAddr)
		if n, _ := strconv.Atoi(p); int32(n) != c.Ports["restate"] || !strings.HasSuffix(cfg.WorkerURL, ".svc:"+p) {
			t.Errorf("%s: port %d, UNKEY_WORKER_ADDR %s, UNKEY_WORKER_URL %s", name, c.Ports["restate"], cfg.WorkerAddr, cfg.WorkerURL)
		}
		if c.Probes["readiness"] != "TCP restate" || !c.NonRoot || !c.ReadOnlyRoot || !c.NoCapabilities {
			t.Errorf("%s: probes %v, non-root %v, read-only %v, no capabilities %v", name, c.Probes, c.NonRoot, c.ReadOnlyRoot, c.NoCapabilities)
		}
	}
}

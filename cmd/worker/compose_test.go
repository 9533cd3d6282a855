package main

import (
	"net"
	"net/url"
	"slices"
	"testing"

	"github.com/unkeyed/ratelimit/internal/composefile"
)

// TestComposeFile checks the worker's service in compose.yaml against what
// the worker reads: the environment loads, names only known variables, and
// its URLs point at the restate service's published ports and at itself.
func TestComposeFile(t *testing.T) {
	f, err := composefile.Load()
	if err != nil {
		t.Fatal(err)
	}
	svc, ok := f.Services["worker"]
	if !ok {
		t.Fatal("compose.yaml has no worker service")
	}
	known := composefile.EnvNames(config{})
	for k := range svc.Environment {
		if !known[k] {
			t.Errorf("worker sets %s, which the worker does not read", k)
		}
	}
	cfg, err := loadConfig(svc.Environ())
	if err != nil {
		t.Fatalf("the worker would not start: %v", err)
	}
	restate := f.Services["restate"]
	for _, u := range []string{cfg.AdminURL, cfg.IngressURL} {
		parsed, _ := url.Parse(u)
		if parsed.Hostname() != "restate" || !slices.Contains(restate.ContainerPorts(), parsed.Port()) {
			t.Errorf("%s is not a port of the restate service (%v)", u, restate.Ports)
		}
	}
	self, _ := url.Parse(cfg.WorkerURL)
	_, port, _ := net.SplitHostPort(cfg.WorkerAddr)
	if self.Hostname() != "worker" || self.Port() != port {
		t.Errorf("UNKEY_WORKER_URL %s does not reach UNKEY_WORKER_ADDR %s of the worker service", cfg.WorkerURL, cfg.WorkerAddr)
	}
	if svc.Build["target"] != "worker" {
		t.Errorf("worker builds target %q", svc.Build["target"])
	}
}

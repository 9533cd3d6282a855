package main

import (
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/composefile"
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
	// The key file exists only inside the stack (TestComposeIsLoopbackAndSigned
	// checks who writes it).
	var environ []string
	for _, kv := range svc.Environ() {
		if !strings.HasPrefix(kv, "UNKEY_RESTATE_IDENTITY_KEY_FILE=") {
			environ = append(environ, kv)
		}
	}
	cfg, err := loadConfig(environ)
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

// TestComposeIsLoopbackAndSigned: every published port of compose.yaml is
// bound to 127.0.0.1, and restate-server signs its requests with the key
// whose public half the worker verifies them with.
func TestComposeIsLoopbackAndSigned(t *testing.T) {
	f, err := composefile.Load()
	if err != nil {
		t.Fatal(err)
	}
	for name, svc := range f.Services {
		for i, ip := range svc.HostIPs() {
			if ip != "127.0.0.1" {
				t.Errorf("%s publishes %s on every interface, want 127.0.0.1 only", name, svc.Ports[i])
			}
		}
	}
	keygen, restate, worker := f.Services["keygen"], f.Services["restate"], f.Services["worker"]
	if len(keygen.Command) != 2 || keygen.Command[0] != "keygen" {
		t.Fatalf("keygen service runs %v, want [keygen FILE]", keygen.Command)
	}
	private := keygen.Command[1]
	if got := restate.Environment["RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE"]; got != private {
		t.Errorf("restate signs with %q, keygen writes %q", got, private)
	}
	if got := worker.Environment["UNKEY_RESTATE_IDENTITY_KEY_FILE"]; got != private+".pub" {
		t.Errorf("the worker verifies with %q, keygen writes the public key to %q", got, private+".pub")
	}
	for _, svc := range []composefile.Service{keygen, restate, worker} {
		if len(svc.Volumes) == 0 || !strings.HasPrefix(svc.Volumes[0], "identity:/identity") {
			t.Errorf("a service of the key pair does not mount the identity volume: %v", svc.Volumes)
		}
	}
}

package e2e

import (
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
)

// TestMakeDev runs scripts/dev.sh (what make dev runs) in a temporary
// directory on ports of its own, checks that it reports ready only when
// every API process answers /readyz and the worker's schedule runs, and that
// `dev.sh down` stops every process.
func TestMakeDev(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	dir := t.TempDir()
	// Below the ephemeral range the other tests' free ports come from, with
	// every derived port (MariaDB base-3763, Redis base-690, Restate
	// base+1010..base+2010) free of the well-known ones.
	base := freeBase(t)
	env := append(os.Environ(), "DEV_DIR="+dir, "DEV_PORT_BASE="+strconv.Itoa(base), "DEV_DETACH=1")
	up := exec.Command("bash", "../scripts/dev.sh")
	up.Env = env
	out, err := up.CombinedOutput()
	down := func() {
		cmd := exec.Command("bash", "../scripts/dev.sh", "down")
		cmd.Env = env
		cmd.CombinedOutput()
	}
	t.Cleanup(down)
	if err != nil || !strings.Contains(string(out), "ready — every process answers its health check") {
		t.Fatalf("dev.sh: %v\n%s", err, out)
	}
	apis := []int{base, base + 1, base + 2, base + 3}
	for _, port := range apis {
		if code := get("http://127.0.0.1:" + strconv.Itoa(port) + "/readyz"); code != http.StatusOK {
			t.Fatalf("API on %d: /readyz %d", port, code)
		}
		if !strings.Contains(string(out), "http://127.0.0.1:"+strconv.Itoa(port)) {
			t.Fatalf("dev.sh did not list the API on %d:\n%s", port, out)
		}
	}
	// Redis has a memory bound, and the worker runs only what restate-server
	// signed (the cleanup schedule reached it: dev.sh waited for it).
	for _, port := range []int{base - 690, base - 689} {
		policy, err := exec.Command("redis-cli", "-p", strconv.Itoa(port), "CONFIG", "GET", "maxmemory-policy").Output()
		if err != nil || !strings.Contains(string(policy), "volatile-ttl") {
			t.Errorf("Redis on %d: maxmemory-policy %q (%v), want volatile-ttl", port, policy, err)
		}
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Protocols: &protocols}}
	resp, err := h2c.Post("http://127.0.0.1:"+strconv.Itoa(base+2010)+"/discover", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an unsigned request to the worker: %d, want 401", resp.StatusCode)
	}
	down()
	for _, port := range append(apis, base-3763, base-690, base+1010, base+2000) {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		poll.Until(t, 10*time.Second, addr+" to stop answering after dev.sh down", func() bool {
			conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err != nil {
				return true
			}
			conn.Close()
			return false
		})
	}
}

// freeBase picks a DEV_PORT_BASE whose ports (see scripts/dev.sh) are all
// free on this machine.
func freeBase(t *testing.T) int {
	basesMu.Lock()
	defer basesMu.Unlock()
	for range 100 {
		base := 11000 + rand.IntN(1000)*4
		ports := []int{base, base + 1, base + 2, base + 3, base - 3763, base - 690, base - 689,
			base + 1010, base + 2000, base - 1948, base + 2010}
		free := true
		for _, port := range ports {
			if reservedPorts[port] {
				free = false
				break
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			for _, port := range ports {
				reservedPorts[port] = true
			}
			return base
		}
	}
	t.Fatal("no free set of ports for dev.sh")
	return 0
}

// The ports of the stacks this process's tests started: tests that run in
// parallel each start one, and a port one chose but has not bound yet
// looks free to the other.
var (
	basesMu       sync.Mutex
	reservedPorts = map[int]bool{}
)

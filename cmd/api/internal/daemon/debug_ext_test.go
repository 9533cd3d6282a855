package daemon_test

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon/daemontest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// TestDebugServer: with UNKEY_DEBUG_ADDR the profiles are served there
// while the process serves, by a loop the daemon starts and stops with the
// others: after the stop, nothing listens there.
func TestDebugServer(t *testing.T) {
	addr := fmt.Sprint("127.0.0.1:", testserver.FreePort(t))
	s := daemontest.Start(t, nil, "UNKEY_DEBUG_ADDR="+addr)
	poll.Until(t, 5*time.Second, "the profiles to be served", func() bool {
		resp, err := http.Get("http://" + addr + "/debug/pprof/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get("http://" + addr + "/debug/pprof/"); err == nil {
		resp.Body.Close()
		t.Fatal("the profiles are still served after the stop")
	}
}

// TestDebugContention: with UNKEY_DEBUG_CONTENTION the mutex profile
// samples one contended lock in 100 while the profiles are served, and
// stops after; without UNKEY_DEBUG_ADDR the setting is refused by name.
func TestDebugContention(t *testing.T) {
	if _, err := daemon.LoadConfig([]string{"UNKEY_REGION=test", "UNKEY_DEBUG_CONTENTION=true"}); err == nil ||
		!strings.Contains(err.Error(), "UNKEY_DEBUG_CONTENTION: needs UNKEY_DEBUG_ADDR") {
		t.Fatalf("UNKEY_DEBUG_CONTENTION without UNKEY_DEBUG_ADDR: %v", err)
	}
	addr := fmt.Sprint("127.0.0.1:", testserver.FreePort(t))
	s := daemontest.Start(t, nil, "UNKEY_DEBUG_ADDR="+addr, "UNKEY_DEBUG_CONTENTION=true")
	poll.Until(t, 5*time.Second, "the mutex profile to sample", func() bool {
		resp, err := http.Get("http://" + addr + "/debug/pprof/mutex?debug=1")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), "sampling period=100")
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := runtime.SetMutexProfileFraction(-1); got != 0 {
		t.Fatalf("after the stop the mutex profile samples 1 in %d, want none", got)
	}
}

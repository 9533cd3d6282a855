package daemon_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

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

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// testServer is an API process of the binary TestMain built, on free
// loopback ports: what the fleet and fault tests run, several at a time,
// beside the Redis and MariaDB processes they start, stop and kill.
type testServer struct {
	url    string
	client *http.Client // HTTP/1.1
	h2c    *http.Client // HTTP/2 with prior knowledge, for gRPC
	// grpcAddr is the grpc-go port's address, with UNKEY_GRPC_ADDR set.
	grpcAddr string
	// close stops the process with SIGTERM (a graceful stop) and reports
	// how it exited; safe to call twice.
	close func() error
}

// startServer starts an API process with environ (UNKEY_REGION=test unless
// it sets a region; UNKEY_GRPC_ADDR=127.0.0.1:0 serves the grpc-go port on
// a free one), stopped when the test ends, and returns once it is ready.
func startServer(t testing.TB, environ ...string) *testServer {
	t.Helper()
	addr := fmt.Sprint("127.0.0.1:", testserver.FreePort(t))
	env := []string{"UNKEY_REGION=test", "UNKEY_HTTP_ADDR=" + addr, "UNKEY_LOG_LEVEL=warn"}
	ts := &testServer{url: "http://" + addr}
	for _, kv := range environ {
		if kv == "UNKEY_GRPC_ADDR=127.0.0.1:0" {
			ts.grpcAddr = fmt.Sprint("127.0.0.1:", testserver.FreePort(t))
			kv = "UNKEY_GRPC_ADDR=" + ts.grpcAddr
		}
		env = append(env, kv)
	}
	cmd := exec.Command(filepath.Join(bin, "api"))
	cmd.Env = env
	log := &lockedWriter{w: &strings.Builder{}}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ts.close = sync.OnceValue(func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			return fmt.Errorf("api did not stop within 30 s of SIGTERM")
		}
	})
	t.Cleanup(func() {
		if err := ts.close(); err != nil {
			t.Errorf("api: %v\n%s", err, log.String())
		}
	})
	ts.client = &http.Client{Timeout: 10 * time.Second}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	ts.h2c = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &protocols}}
	poll.Until(t, 30*time.Second, "the API process to report ready", func() bool {
		resp, err := http.Get(ts.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return ts
}

// call posts a Connect JSON request and decodes the JSON answer.
func (ts *testServer) call(t testing.TB, method, token, body string) (int, map[string]any) {
	t.Helper()
	status, raw := loopback.Post(t, ts.url+"/ratelimit.v1.RatelimitService/"+method, token, "application/json", strings.NewReader(body))
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s answered %d with %q: %v", method, status, raw, err)
	}
	return status, out
}

// lockedWriter is a log destination the process's output goroutine and
// the test may share.
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// String returns what was written.
func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// grepLines returns the lines of s that hold substr.
func grepLines(s, substr string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

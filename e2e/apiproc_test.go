package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
	req, err := http.NewRequest(http.MethodPost, ts.url+"/ratelimit.v1.RatelimitService/"+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s answered %d with %q: %v", method, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, out
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

// rlsClient dials addr with grpc-go and Envoy's generated stubs, as an
// Envoy-based gateway's rate limit client calls the service.
func rlsClient(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	return rlsv3.NewRateLimitServiceClient(loopback.Dial(t, addr))
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// withHits sets a descriptor's own hits_addend.
func withHits(d *rlcommonv3.RateLimitDescriptor, n uint64) *rlcommonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// rlsStatus is what a test expects of one descriptor's status: its code, the
// limit that applied (0 and "" for none) and what remains of it.
type rlsStatus struct {
	over      bool
	limit     uint32
	unit      string
	remaining uint32
}

func statusOf(s *rlsv3.RateLimitResponse_DescriptorStatus) rlsStatus {
	got := rlsStatus{over: s.Code == rlsv3.RateLimitResponse_OVER_LIMIT, remaining: s.LimitRemaining}
	if l := s.CurrentLimit; l != nil {
		got.limit, got.unit = l.RequestsPerUnit, l.Unit.String()
	}
	return got
}

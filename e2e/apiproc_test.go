package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// testServer is an API process of the binary TestMain built (a proc) on
// free loopback ports: what the fleet and fault tests run, several at a
// time, beside the Redis and MariaDB processes they start, stop and kill.
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

// regionStarter returns a function that starts an API process of a
// region (with environ besides): every region on one MariaDB, each region
// on a Redis of its own, started with the region's first process.
func regionStarter(t *testing.T, environ ...string) func(region string) *testServer {
	t.Helper()
	m, _ := dbtest.Start(t)
	redis := map[string]*testserver.Redis{}
	return func(region string) *testServer {
		r, ok := redis[region]
		if !ok {
			r = testserver.StartRedis(t)
			redis[region] = r
		}
		return startServer(t, append([]string{"UNKEY_REGION=" + region, "UNKEY_REDIS_URL=" + r.URL(), "UNKEY_MYSQL_DSN=" + m.DSN}, environ...)...)
	}
}

// startServer starts an API process with environ (UNKEY_REGION=test unless
// it sets a region; UNKEY_GRPC_ADDR=127.0.0.1:0 serves the grpc-go port on
// a free one), stopped when the test ends, and returns once it is ready. A
// stop that is not clean fails the test, with the process's log.
func startServer(t *testing.T, environ ...string) *testServer {
	t.Helper()
	p := &proc{t: t, name: "api", region: "test", log: filepath.Join(t.TempDir(), "api.log")}
	for _, kv := range environ {
		if region, ok := strings.CutPrefix(kv, "UNKEY_REGION="); ok {
			p.region = region
		}
	}
	ts := &testServer{}
	p.startOnFreePort(func(port int) []string {
		env := []string{"UNKEY_REGION=test", fmt.Sprint("UNKEY_HTTP_ADDR=127.0.0.1:", port), "UNKEY_LOG_LEVEL=warn"}
		for _, kv := range environ {
			if kv == "UNKEY_GRPC_ADDR=127.0.0.1:0" {
				ts.grpcAddr = fmt.Sprint("127.0.0.1:", testserver.FreePort(t))
				kv = "UNKEY_GRPC_ADDR=" + ts.grpcAddr
			}
			env = append(env, kv)
		}
		return env
	})
	ts.url = p.url()
	ts.close = sync.OnceValue(p.stop)
	t.Cleanup(func() {
		if err := ts.close(); err != nil {
			log, _ := os.ReadFile(p.log)
			t.Errorf("api: %v\n%s", err, log)
		}
	})
	ts.client = &http.Client{Timeout: 10 * time.Second}
	ts.h2c = loopback.H2C()
	ts.h2c.Timeout = 10 * time.Second
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

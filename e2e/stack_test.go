// Package e2e tests the whole stack as a team would run it: the API and the
// worker built as binaries and run as processes, MariaDB, one Redis per
// region and restate-server, all private to the test and on loopback.
package e2e

import (
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/services/ratelimit/redisstore"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// bin holds the binaries TestMain builds.
var bin string

func TestMain(m *testing.M) {
	// E2E_BIN_DIR names binaries built already (api, worker, floorserver),
	// for a machine without Go: make scaling-kit packs them with this
	// package's test binary.
	if dir := os.Getenv("E2E_BIN_DIR"); dir != "" {
		bin = dir
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ratelimit-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	// As make build builds them: with the flags of every build of the
	// programs, so that on a cold cache this compiles nothing twice.
	if out, err := exec.Command("make", "-C", "..", "--no-print-directory", "build", "BUILD_DIR="+dir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "make build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one API or worker process.
type proc struct {
	t      *testing.T
	name   string
	region string
	port   int
	env    []string
	cmd    *exec.Cmd
	done   chan struct{}
	log    string
	// exited is how the process ended, once done is closed.
	exited error
	// binary, if set, is the program run instead of bin/api or
	// bin/worker; noWait waits only until it answers /healthz, not until
	// it is ready.
	binary string
	noWait bool
}

func (p *proc) url() string { return "http://127.0.0.1:" + strconv.Itoa(p.port) }

// start runs the process and, for an API, waits until /readyz answers.
func (p *proc) start() {
	p.t.Helper()
	if err := p.tryStart(); err != nil {
		p.t.Fatal(err)
	}
}

// startOnFreePort starts the process on a fresh free port (env builds its
// environment for a port), trying again while the port it picked turns out
// to be taken by the time the process binds it.
func (p *proc) startOnFreePort(env func(port int) []string) {
	p.t.Helper()
	for attempt := 1; ; attempt++ {
		p.port = testserver.FreePort(p.t)
		p.env = env(p.port)
		err := p.tryStart()
		if err == nil {
			return
		}
		log, _ := os.ReadFile(p.log)
		if attempt == 3 || !strings.Contains(string(log), "address already in use") {
			p.t.Fatal(err)
		}
	}
}

func (p *proc) tryStart() error {
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	name := "api"
	if p.region == "" {
		name = "worker"
	}
	p.cmd = exec.Command(filepath.Join(bin, name))
	if p.binary != "" {
		p.cmd = exec.Command(p.binary)
	}
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.done = make(chan struct{})
	go func() { p.exited = p.cmd.Wait(); out.Close(); close(p.done) }()
	ready := func() bool { return get(p.url()+"/readyz") == http.StatusOK }
	if p.noWait { // up once it answers at all
		ready = func() bool { return get(p.url()+"/healthz") == http.StatusOK }
	}
	if p.region == "" { // the worker serves h2c only: ready once it listens
		ready = func() bool {
			conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p.port), 100*time.Millisecond)
			if err == nil {
				conn.Close()
			}
			return err == nil
		}
	}
	deadline := time.Now().Add(poll.Scaled(20 * time.Second))
	for !ready() {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during start-up (log %s)", p.name, p.log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after 20 s (log %s)", p.name, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// kill kills the process at once (SIGKILL).
func (p *proc) kill() { p.signal(syscall.SIGKILL) }

// stop stops the process with SIGTERM, a graceful stop, and returns how it
// exited.
func (p *proc) stop() error {
	p.signal(syscall.SIGTERM)
	return p.exited
}

func (p *proc) signal(sig syscall.Signal) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(sig)
	<-p.done
}

// stack is the whole system: two regions (a, b) of two API processes each.
type stack struct {
	t       *testing.T
	mysql   *testserver.MariaDB
	sqlDB   *sql.DB
	redis   map[string]*testserver.Redis
	restate *testserver.Restate
	apis    []*proc
	worker  *proc
}

func startStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{t: t, redis: map[string]*testserver.Redis{}}
	s.mysql, s.sqlDB = dbtest.Start(t)
	s.restate = testserver.StartRestate(t)
	logs := t.TempDir()
	for _, region := range []string{"a", "b"} {
		s.redis[region] = testserver.StartRedis(t)
		for i := 1; i <= 2; i++ {
			p := &proc{t: t, name: fmt.Sprintf("api-%s%d", region, i), region: region}
			p.log = filepath.Join(logs, p.name+".log")
			t.Cleanup(p.kill)
			p.startOnFreePort(func(port int) []string {
				return []string{"UNKEY_REGION=" + region, "UNKEY_HTTP_ADDR=127.0.0.1:" + strconv.Itoa(port),
					"UNKEY_REDIS_URL=" + s.redis[region].URL(), "UNKEY_MYSQL_DSN=" + s.mysql.DSN, "UNKEY_LOG_FORMAT=text", "UNKEY_LOG_LEVEL=warn"}
			})
			s.apis = append(s.apis, p)
		}
	}
	s.worker = &proc{t: t, name: "worker", log: filepath.Join(logs, "worker.log")}
	t.Cleanup(s.worker.kill)
	s.worker.startOnFreePort(func(port int) []string {
		return []string{"UNKEY_MYSQL_DSN=" + s.mysql.DSN, "UNKEY_RESTATE_ADMIN_URL=" + s.restate.AdminURL,
			"UNKEY_RESTATE_INGRESS_URL=" + s.restate.IngressURL, "UNKEY_WORKER_ADDR=127.0.0.1:" + strconv.Itoa(port),
			"UNKEY_RESTATE_IDENTITY_KEYS=" + s.restate.IdentityKey, "UNKEY_LOG_FORMAT=text", "UNKEY_LOG_LEVEL=warn"}
	})
	return s
}

func (s *stack) urls() []string {
	var out []string
	for _, p := range s.apis {
		out = append(out, p.url())
	}
	return out
}

func (s *stack) regionOf(url string) string {
	for _, p := range s.apis {
		if p.url() == url {
			return p.region
		}
	}
	return ""
}

// redisTotal sums what region's Redis holds for the identifiers of
// namespace in the "default" workspace over the sequences of [from, to].
func (s *stack) redisTotal(region, namespace string, ids []string, dur time.Duration, from, to time.Time) int64 {
	var total int64
	for _, id := range ids {
		for seq := from.UnixMilli() / dur.Milliseconds(); seq <= to.UnixMilli()/dur.Milliseconds(); seq++ {
			c := store.CellKey{Workspace: "default", Namespace: namespace, Identifier: id, Duration: dur, Sequence: seq}
			v, err := s.redis[region].Do("GET", redisstore.Key(&c))
			if err != nil {
				s.t.Fatal(err)
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
		}
	}
	return total
}

func get(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// getBody GETs url and returns its body; any status but 200 fails.
func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

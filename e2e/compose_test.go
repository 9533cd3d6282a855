package e2e

import (
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/internal/testkit/composefile"
	"github.com/unkeyed/ratelimit/services/ratelimit/redisstore"
)

// TestComposeFile holds compose.yaml, which cannot run here, to the two
// binaries: every API service's environment names only variables `api
// --help` lists and loads (`api config check`), listens on the port it
// publishes, and points at services the file defines, one Redis a region;
// migrate runs `api migrate` on the same database; the worker's
// environment loads in the worker, and its URLs reach the restate
// service's published ports and itself.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	f, err := composefile.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mysql", "migrate", "redis-a", "redis-b", "restate", "api-a1", "api-a2", "api-b1", "api-b2", "worker"} {
		if _, ok := f.Services[name]; !ok {
			t.Fatalf("compose.yaml has no service %q", name)
		}
	}
	api := settings(t, "api")
	regions := map[string]string{}
	for name, svc := range f.Services {
		if !strings.HasPrefix(name, "api-") {
			continue
		}
		for k := range svc.Environment {
			if _, ok := api[k]; !ok {
				t.Errorf("%s sets %s, which the API does not read", name, k)
			}
		}
		if out, err := configCheck(t, "api", svc.Environ()); err != nil {
			t.Fatalf("%s: the API would not start: %v\n%s", name, err, out)
		}
		cfg := newLoaded(svc.Environ(), api)
		_, port, _ := net.SplitHostPort(cfg.get("UNKEY_HTTP_ADDR"))
		if !slices.Contains(svc.ContainerPorts(), port) {
			t.Errorf("%s listens on %s but publishes %v", name, port, svc.Ports)
		}
		redisOpts, rerr := redisstore.Options(cfg.get("UNKEY_REDIS_URL"))
		mysqlCfg, merr := cmdutil.ParseMySQLDSN(cfg.get("UNKEY_MYSQL_DSN"))
		if rerr != nil || merr != nil {
			t.Fatalf("%s: needs both UNKEY_REDIS_URL and UNKEY_MYSQL_DSN (%v, %v)", name, rerr, merr)
		}
		redisHost, _, _ := net.SplitHostPort(redisOpts.Addr)
		if _, ok := f.Services[redisHost]; !ok {
			t.Errorf("%s: UNKEY_REDIS_URL names %q, not a service", name, redisHost)
		}
		checkMySQL(t, f, name, mysqlCfg)
		region := cfg.get("UNKEY_REGION")
		if prev, ok := regions[region]; ok && prev != redisHost {
			t.Errorf("region %s uses two Redis servers (%s and %s)", region, prev, redisHost)
		}
		regions[region] = redisHost
		if svc.Build["target"] != "api" {
			t.Errorf("%s builds target %q, want api", name, svc.Build["target"])
		}
	}
	if len(regions) != 2 {
		t.Errorf("%d regions in compose.yaml, want 2", len(regions))
	}
	m := f.Services["migrate"]
	if !slices.Equal(m.Command, []string{"migrate"}) {
		t.Errorf("migrate runs %v, want [migrate]", m.Command)
	}
	dsn, err := mysql.ParseDSN(m.Environment["UNKEY_MYSQL_DSN"])
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	checkMySQL(t, f, "migrate", dsn)

	worker, svc := settings(t, "worker"), f.Services["worker"]
	for k := range svc.Environment {
		if _, ok := worker[k]; !ok {
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
	if out, err := configCheck(t, "worker", environ); err != nil {
		t.Fatalf("the worker would not start: %v\n%s", err, out)
	}
	cfg := newLoaded(environ, worker)
	restate := f.Services["restate"]
	for _, u := range []string{cfg.get("UNKEY_RESTATE_ADMIN_URL"), cfg.get("UNKEY_RESTATE_INGRESS_URL")} {
		parsed, _ := url.Parse(u)
		if parsed.Hostname() != "restate" || !slices.Contains(restate.ContainerPorts(), parsed.Port()) {
			t.Errorf("%s is not a port of the restate service (%v)", u, restate.Ports)
		}
	}
	self, _ := url.Parse(cfg.get("UNKEY_WORKER_URL"))
	_, port, _ := net.SplitHostPort(cfg.get("UNKEY_WORKER_ADDR"))
	if self.Hostname() != "worker" || self.Port() != port {
		t.Errorf("UNKEY_WORKER_URL %s does not reach UNKEY_WORKER_ADDR %s of the worker service", cfg.get("UNKEY_WORKER_URL"), cfg.get("UNKEY_WORKER_ADDR"))
	}
	if svc.Build["target"] != "worker" {
		t.Errorf("worker builds target %q", svc.Build["target"])
	}
}

func checkMySQL(t *testing.T, f *composefile.File, name string, dsn *mysql.Config) {
	t.Helper()
	host, port, _ := net.SplitHostPort(dsn.Addr)
	svc, ok := f.Services[host]
	if !ok || port != "3306" || !slices.Contains(svc.ContainerPorts(), "3306") {
		t.Errorf("%s: UNKEY_MYSQL_DSN points at %s, not the mysql service's port 3306", name, dsn.Addr)
	}
	if svc.Environment["MYSQL_DATABASE"] != dsn.DBName {
		t.Errorf("%s uses database %q, mysql creates %q", name, dsn.DBName, svc.Environment["MYSQL_DATABASE"])
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

package daemon_test

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/internal/testkit/composefile"
	"github.com/unkeyed/ratelimit/services/ratelimit/redisstore"
)

// TestComposeFile checks compose.yaml, which cannot run here, against what
// the API really reads: every API service's environment loads, names only
// variables the API knows, listens on the port it publishes, and points at
// services the file defines.
func TestComposeFile(t *testing.T) {
	f, err := composefile.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mysql", "migrate", "redis-a", "redis-b", "restate", "api-a1", "api-a2", "api-b1", "api-b2", "worker"} {
		if _, ok := f.Services[name]; !ok {
			t.Fatalf("compose.yaml has no service %q", name)
		}
	}
	known := composefile.EnvNames(daemon.Config{})
	regions := map[string]string{}
	for name, svc := range f.Services {
		if !strings.HasPrefix(name, "api-") {
			continue
		}
		for k := range svc.Environment {
			if !known[k] {
				t.Errorf("%s sets %s, which the API does not read", name, k)
			}
		}
		cfg, err := daemon.LoadConfig(svc.Environ())
		if err != nil {
			t.Fatalf("%s: the API would not start: %v", name, err)
		}
		_, port, _ := net.SplitHostPort(cfg.HTTPAddr)
		if !slices.Contains(svc.ContainerPorts(), port) {
			t.Errorf("%s listens on %s but publishes %v", name, port, svc.Ports)
		}
		redisOpts, rerr := redisstore.Options(cfg.RedisURL)
		mysqlCfg, merr := cmdutil.ParseMySQLDSN(cfg.MySQLDSN)
		if cfg.RedisURL == "" || cfg.MySQLDSN == "" || rerr != nil || merr != nil {
			t.Fatalf("%s: needs both UNKEY_REDIS_URL and UNKEY_MYSQL_DSN (%v, %v)", name, rerr, merr)
		}
		redisHost, _, _ := net.SplitHostPort(redisOpts.Addr)
		if _, ok := f.Services[redisHost]; !ok {
			t.Errorf("%s: UNKEY_REDIS_URL names %q, not a service", name, redisHost)
		}
		checkMySQL(t, f, name, mysqlCfg)
		if prev, ok := regions[cfg.Region]; ok && prev != redisHost {
			t.Errorf("region %s uses two Redis servers (%s and %s)", cfg.Region, prev, redisHost)
		}
		regions[cfg.Region] = redisHost
		if svc.Build["target"] != "api" {
			t.Errorf("%s builds target %q, want api", name, svc.Build["target"])
		}
	}
	if len(regions) != 2 {
		t.Errorf("%d regions in compose.yaml, want 2", len(regions))
	}
	// The migrate service runs `api migrate` against the same database.
	m := f.Services["migrate"]
	if !slices.Equal(m.Command, []string{"migrate"}) {
		t.Errorf("migrate runs %v, want [migrate]", m.Command)
	}
	dsn, err := mysql.ParseDSN(m.Environment["UNKEY_MYSQL_DSN"])
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	checkMySQL(t, f, "migrate", dsn)
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

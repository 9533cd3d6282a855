package testserver

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// installTimeout bounds a data directory's bootstrap.
const installTimeout = 3 * time.Minute

// MariaDB is a private MariaDB server with one empty database. It runs with
// --skip-grant-tables, so any user name works and no password is needed.
type MariaDB struct {
	// DSN is a go-sql-driver/mysql data source name for the database.
	DSN  string
	Port int
	proc process
}

// StartMariaDB initialises a data directory in a temporary directory, starts
// mariadbd on a free port, with args added to its command line (such as
// --ssl-cert), and creates the database "ratelimit". It stops the server
// when the test ends and fails the test when the server binaries are not
// installed (make test installs them).
func StartMariaDB(t testing.TB, args ...string) *MariaDB {
	t.Helper()
	install, err := exec.LookPath("mariadb-install-db")
	if err != nil {
		t.Fatalf("mariadb-install-db is not installed (make test installs mariadb-server): %v", err)
	}
	server, err := exec.LookPath("mariadbd")
	if err != nil {
		if server, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			t.Fatalf("mariadbd is not installed (make test installs mariadb-server): %v", err)
		}
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	// Its own directory for temporary tables, for the bootstrap as for the
	// server, not the shared /tmp: MariaDBs bootstrapping there at once
	// delete each other's temporary tables (seven of 24 installs failed
	// with eight at once, "Unknown table 'mysql.tmp_proxies_priv'"; none of
	// 80 with a directory each).
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	// A few seconds, a minute on a loaded machine: a hung install fails its
	// test here rather than the whole run at go test's timeout. The script
	// runs mariadbd: killed as a group, with the output it had.
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, install, "--no-defaults", "--datadir="+data, "--tmpdir="+tmp, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	m := &MariaDB{}
	m.proc = process{t: t, name: server, log: filepath.Join(dir, "mariadb.log")}
	t.Cleanup(m.Kill)
	m.proc.startOnFreePorts(func() {
		m.Port = FreePort(t)
		m.proc.args = []string{
			"--no-defaults", "--datadir=" + data, "--socket=" + filepath.Join(dir, "mysqld.sock"),
			"--port=" + strconv.Itoa(m.Port), "--bind-address=127.0.0.1", "--user=root",
			"--skip-grant-tables", "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
			"--innodb-buffer-pool-size=64M", "--innodb-log-file-size=16M",
			"--character-set-server=utf8mb4", "--collation-server=utf8mb4_bin",
			"--max-connections=500",
			// Its own temporary tables' directory (see above): under
			// -count=20 in the shared /tmp two of 20 runs lost a
			// temporary table's file mid-query (Errcode 2 on its delete).
			"--tmpdir=" + tmp,
		}
		m.proc.args = append(m.proc.args, args...)
	}, m.ping, 60*time.Second)
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = "127.0.0.1:" + strconv.Itoa(m.Port)
	cfg.DBName = "ratelimit"
	cfg.Timeout = time.Second
	// As the programs open their pools: one round trip a statement.
	cfg.InterpolateParams = true
	m.DSN = cfg.FormatDSN()
	db, err := sql.Open("mysql", m.serverDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE IF NOT EXISTS ratelimit"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return m
}

// serverDSN is the DSN without a database, for start-up checks.
func (m *MariaDB) serverDSN() string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/?timeout=1s", m.Port)
}

// Start starts the server again after Kill, with the same data.
func (m *MariaDB) Start() {
	m.proc.t.Helper()
	m.proc.start(m.ping, 60*time.Second)
}

func (m *MariaDB) ping() error {
	db, err := sql.Open("mysql", m.serverDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Ping()
}

// Kill kills the server at once, as a crash would.
func (m *MariaDB) Kill() { m.proc.signal(syscall.SIGKILL) }

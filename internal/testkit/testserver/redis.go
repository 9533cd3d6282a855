package testserver

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Redis is a private redis-server. It keeps its data in an append-only file
// synced on every write, so a kill and restart loses nothing it acknowledged.
type Redis struct {
	// Addr is host:port.
	Addr string
	dir  string
	proc process
	// tls, if set, is how Do (and the readiness check) reach a server that
	// speaks TLS only.
	tls *tls.Config
}

// StartRedis starts a redis-server on a free port and stops it when the test
// ends. It fails the test when redis-server is not installed (make test
// installs it).
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	return startRedis(t, nil)
}

// startRedis starts a redis-server; extra returns further arguments for the
// port it is about to take.
func startRedis(t testing.TB, extra func(dir string) []string) *Redis {
	t.Helper()
	return startRedisWith(t, nil, extra)
}

// StartRedisTLS starts a redis-server that speaks TLS only, with the PEM
// certificate and key given and without asking clients for certificates;
// client is how the tests' own commands reach it (its RootCAs trust the
// certificate).
func StartRedisTLS(t testing.TB, certFile, keyFile, caFile string, client *tls.Config) *Redis {
	t.Helper()
	return startRedisWith(t, client, func(string) []string {
		// The plain port becomes the TLS port; no cleartext listener.
		return []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile,
			"--tls-auth-clients", "no"}
	})
}

// StartRedisMutualTLS is StartRedisTLS for a server that refuses a client
// without a certificate caFile's CA signed; client must present one.
func StartRedisMutualTLS(t testing.TB, certFile, keyFile, caFile string, client *tls.Config) *Redis {
	t.Helper()
	return startRedisWith(t, client, func(string) []string {
		return []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile,
			"--tls-auth-clients", "yes"}
	})
}

// StartRedisEverySec is StartRedis with the append-only file synced once
// a second (Redis's own default when it is on) instead of at every write:
// for benchmarks of calls that wait on a write, which would otherwise
// measure the disk.
func StartRedisEverySec(t testing.TB) *Redis {
	t.Helper()
	return startRedisWith(t, nil, func(string) []string { return []string{"--appendfsync", "everysec"} })
}

func startRedisWith(t testing.TB, client *tls.Config, extra func(dir string) []string) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (make test installs it): %v", err)
	}
	dir := t.TempDir()
	r := &Redis{dir: dir, tls: client}
	r.proc = process{t: t, name: bin, log: filepath.Join(dir, "redis.log")}
	t.Cleanup(r.Kill)
	r.proc.startOnFreePorts(func() {
		port := FreePort(t)
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		r.proc.args = []string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "yes", "--appendfsync", "always",
			"--protected-mode", "no", "--daemonize", "no",
		}
		if extra != nil {
			r.proc.args = append(r.proc.args, extra(dir)...)
		}
		if client != nil {
			// The port speaks TLS only.
			r.proc.args = append(r.proc.args, "--tls-port", strconv.Itoa(port), "--port", "0")
		}
	}, r.ping, 10*time.Second)
	return r
}

// URL returns the redis:// URL of the server.
func (r *Redis) URL() string { return "redis://" + r.Addr }

// Start starts the server again after Kill, on the same port and
// with the same data.
func (r *Redis) Start() {
	r.proc.t.Helper()
	r.proc.start(r.ping, 10*time.Second)
}

// StartEmpty starts the server again after Kill, on the same port but
// without its data: a server without persistence, or whose disk was lost.
func (r *Redis) StartEmpty() {
	r.proc.t.Helper()
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		r.proc.t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "redis.log" {
			if err := os.RemoveAll(filepath.Join(r.dir, e.Name())); err != nil {
				r.proc.t.Fatal(err)
			}
		}
	}
	r.Start()
}

// Kill kills the server at once, as a crash would.
func (r *Redis) Kill() { r.proc.signal(syscall.SIGKILL) }

// Pid returns the server's process id, for reading what CPU it used.
func (r *Redis) Pid() int { return r.proc.cmd.Process.Pid }

// Do sends one command and returns its reply, for tests that inspect the
// server directly (INFO, GET, PTTL, KEYS, …): a status, integer or bulk
// reply as its text ("" for nil), an array as its elements joined by
// newlines.
func (r *Redis) Do(args ...string) (string, error) {
	var conn net.Conn
	var err error
	if r.tls != nil {
		conn, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", r.Addr, r.tls)
	} else {
		conn, err = net.DialTimeout("tcp", r.Addr, time.Second)
	}
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

// readReply reads one RESP2 reply.
func readReply(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("redis: empty reply line")
	}
	switch line[0] {
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n <= 0 {
			return "", err
		}
		items := make([]string, n)
		for i := range items {
			if items[i], err = readReply(rd); err != nil {
				return "", err
			}
		}
		return strings.Join(items, "\n"), nil
	default:
		return line[1:], nil
	}
}

func (r *Redis) ping() error {
	reply, err := r.Do("PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("PING answered %q", reply)
	}
	return nil
}

// Freeze stops the server without closing its connections (SIGSTOP): calls
// to it hang, as with a server that is alive but stuck.
func (r *Redis) Freeze() { syscall.Kill(r.proc.cmd.Process.Pid, syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (r *Redis) Thaw() { syscall.Kill(r.proc.cmd.Process.Pid, syscall.SIGCONT) }

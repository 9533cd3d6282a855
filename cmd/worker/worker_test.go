package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/envconfig"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/services/audit"
	"github.com/unkeyed/ratelimit/workflows/cleanup"
)

func TestConfigErrorsNameTheVariable(t *testing.T) {
	dsn := "UNKEY_MYSQL_DSN=root@tcp(127.0.0.1:3306)/ratelimit"
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "UNKEY_MYSQL_DSN"},
		{[]string{"UNKEY_MYSQL_DSN=root@tcp(x)/"}, "UNKEY_MYSQL_DSN: must name a database"},
		{[]string{dsn, "UNKEY_RESTATE_ADMIN_URL=localhost:9070"}, "UNKEY_RESTATE_ADMIN_URL: must be an http"},
		{[]string{dsn, "UNKEY_RESTATE_INGRESS_URL=ftp://x"}, "UNKEY_RESTATE_INGRESS_URL: must be an http"},
		{[]string{dsn, "UNKEY_WORKER_ADDR=9080"}, "UNKEY_WORKER_ADDR: must be host:port"},
		{[]string{dsn, "UNKEY_WORKER_URL=worker:9080"}, "UNKEY_WORKER_URL: must be an http"},
		{[]string{dsn, "UNKEY_LOG_FORMAT=xml"}, "UNKEY_LOG_FORMAT"},
	} {
		if _, err := loadConfig(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("loadConfig(%q) = %v, want an error containing %q", tc.env, err, tc.want)
		}
	}
	if _, err := loadConfig([]string{dsn, "UNKEY_RESTATE_IDENTITY_KEYS=abc"}); err == nil ||
		!strings.Contains(err.Error(), "UNKEY_RESTATE_IDENTITY_KEYS: entry 1 must be a publickeyv1_") {
		t.Errorf("a malformed identity key: %v", err)
	}
	keyFile := filepath.Join(t.TempDir(), "keys.pub")
	os.WriteFile(keyFile, []byte("publickeyv1_abc\n\nnot-a-key\n"), 0o644)
	if _, err := loadConfig([]string{dsn, "UNKEY_RESTATE_IDENTITY_KEY_FILE=" + keyFile}); err == nil ||
		!strings.Contains(err.Error(), "UNKEY_RESTATE_IDENTITY_KEY_FILE: line 3 must be a publickeyv1_") {
		t.Errorf("a key file with a bad line: %v", err)
	}
	os.WriteFile(keyFile, []byte("publickeyv1_abc\n"), 0o644)
	if c, err := loadConfig([]string{dsn, "UNKEY_RESTATE_IDENTITY_KEYS=publickeyv1_def", "UNKEY_RESTATE_IDENTITY_KEY_FILE=" + keyFile}); err != nil ||
		strings.Join(c.IdentityKeys, ",") != "publickeyv1_def,publickeyv1_abc" {
		t.Errorf("keys from the variable and the file: %v, %v", c.IdentityKeys, err)
	}
	if c, err := loadConfig([]string{dsn}); err != nil || c.WorkerAddr != "127.0.0.1:9080" || c.AuditRetention != audit.Retention {
		t.Errorf("default address = %q, %v; want loopback only", c.WorkerAddr, err)
	}
	c, err := loadConfig([]string{dsn, "UNKEY_WORKER_ADDR=:9999"})
	if err != nil || c.WorkerURL != "http://127.0.0.1:9999" || c.AdminURL != "http://127.0.0.1:9070" {
		t.Fatalf("defaults = %+v, %v", c, err)
	}
}

// TestWorkerRegistersAndStartsTheSchedule runs the real worker against a real
// restate-server and MariaDB, twice: it registers itself and starts the
// retention schedule, and doing it again changes nothing. Between the two,
// a schedule is started under the key workers used before (as a deployment
// being upgraded has one): the second worker stops it, and one chain runs.
func TestWorkerRegistersAndStartsTheSchedule(t *testing.T) {
	m, _ := dbtest.Start(t)
	r := testserver.StartRestate(t)
	port := testserver.FreePort(t)
	environ := []string{"UNKEY_MYSQL_DSN=" + m.DSN, "UNKEY_RESTATE_ADMIN_URL=" + r.AdminURL,
		"UNKEY_RESTATE_INGRESS_URL=" + r.IngressURL, "UNKEY_WORKER_ADDR=127.0.0.1:" + strconv.Itoa(port),
		"UNKEY_RESTATE_IDENTITY_KEYS=" + r.IdentityKey}
	for round := 1; round <= 2; round++ {
		if round == 2 {
			if _, err := r.Post(r.IngressURL+"/Cleanup/"+cleanup.LegacyKey+"/Start/send", "{}"); err != nil {
				t.Fatal(err)
			}
		}
		cfg, err := loadConfig(environ)
		if err != nil {
			t.Fatal(err)
		}
		w, err := newWorker(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		w.healthEvery = 50 * time.Millisecond
		ln, err := net.Listen("tcp", cfg.WorkerAddr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.serve(ctx, ln) }()
		waitScheduled(t, r, fmt.Sprintf("round %d", round))
		rows, err := r.Query("SELECT id FROM sys_deployment")
		if err != nil || len(rows) != 1 {
			t.Fatalf("round %d: %d deployments (%v), want 1", round, len(rows), err)
		}
		poll.Until(t, 10*time.Second, fmt.Sprintf("round %d: no schedule under the legacy key", round), func() bool {
			out, err := r.Post(r.IngressURL+"/Cleanup/"+cleanup.LegacyKey+"/Status", "")
			return err == nil && (round == 1 || strings.Contains(out, `"scheduled":false`))
		})
		// One chain means one run not yet completed. A run sends its
		// successor just before it completes, so for a moment two can be
		// seen; a second chain would keep two for good.
		poll.Until(t, 10*time.Second, fmt.Sprintf("round %d: one pending cleanup run", round), func() bool {
			rows, err := r.Query("SELECT id FROM sys_invocation WHERE target_service_name = 'Cleanup' AND target_handler_name = 'Run' AND status != 'completed'")
			return err == nil && len(rows) == 1
		})
		// Every worker start sends Start with one idempotency key: one
		// invocation, however many starts and attempts.
		w.startCleanup(context.Background())
		rows, err = r.Query("SELECT id FROM sys_invocation WHERE target_service_name = 'Cleanup' AND target_handler_name = 'Start' AND target_service_key = '" + cleanup.DefaultKey + "'")
		if err != nil || len(rows) != 1 {
			t.Fatalf("round %d: %d Start invocations (%v), want 1", round, len(rows), err)
		}
		// The schedule's health, as Prometheus reads it.
		poll.Until(t, 10*time.Second, fmt.Sprintf("round %d: the worker's metrics to say the schedule runs", round), func() bool {
			resp, err := http.Get("http://" + cfg.WorkerAddr + "/metrics")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return strings.Contains(string(b), "\nunkey_worker_cleanup_running 1\n")
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: serve = %v", round, err)
		}
		w.close()
	}
}

// TestWorkerVerifiesRequestIdentity: with UNKEY_RESTATE_IDENTITY_KEYS set, a
// request that restate-server did not sign (a caller reaching the worker
// port directly) is refused with 401 before any handler runs, while
// restate-server's signed requests register the worker and run its jobs.
func TestWorkerVerifiesRequestIdentity(t *testing.T) {
	m, _ := dbtest.Start(t)
	r := testserver.StartRestate(t)
	cfg, err := loadConfig([]string{"UNKEY_MYSQL_DSN=" + m.DSN, "UNKEY_RESTATE_ADMIN_URL=" + r.AdminURL,
		"UNKEY_RESTATE_INGRESS_URL=" + r.IngressURL, "UNKEY_WORKER_ADDR=127.0.0.1:0", "UNKEY_RESTATE_IDENTITY_KEYS=" + r.IdentityKey})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.WorkerAddr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.WorkerURL = "http://" + ln.Addr().String()
	w, err := newWorker(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.serve(ctx, ln) }()
	defer func() { cancel(); <-done }()

	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Protocols: &protocols}}
	for _, path := range []string{"/discover", "/invoke/BlocklistDrain/x/Approve"} {
		req, _ := http.NewRequest(http.MethodPost, cfg.WorkerURL+path, strings.NewReader(`{"by":"mallory"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := h2c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("unsigned POST %s: %d, want 401", path, resp.StatusCode)
		}
	}
	waitScheduled(t, r, "signed requests")
}

// waitScheduled waits up to 30 s for the worker to have registered itself
// and started the retention schedule.
func waitScheduled(t *testing.T, r *testserver.Restate, what string) {
	t.Helper()
	poll.Until(t, 30*time.Second, what+": the worker to register and start the schedule", func() bool {
		out, err := r.Post(r.IngressURL+"/Cleanup/"+cleanup.DefaultKey+"/Status", "")
		return err == nil && strings.Contains(out, `"scheduled":true`)
	})
}

// TestSettingsHaveHelpAndTheirDefaults: every setting has help, and the
// default --help shows for it is the value the worker uses when its
// variable is unset. (What the binary prints is held in e2e/TestHelp.)
func TestSettingsHaveHelpAndTheirDefaults(t *testing.T) {
	if n := len(envconfig.Settings(config{})); n < 8 {
		t.Fatalf("%d settings: the walk missed fields", n)
	}
	if err := envconfig.CheckUsage("", config{}, nil); err != nil {
		t.Error(err)
	}
}

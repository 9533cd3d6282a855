package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/restatedev/sdk-go/server"
	"golang.org/x/sync/errgroup"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/workflows/blocklistdrain"
	"github.com/unkeyed/ratelimit/workflows/cleanup"
)

const (
	// shutdownTimeout bounds how long in-flight invocations may take to
	// finish after SIGTERM; Restate retries whatever did not.
	shutdownTimeout = 20 * time.Second
	// retryEvery is the pause between attempts to reach restate-server at
	// start-up.
	retryEvery = time.Second
	// healthEvery is how often the worker reads the cleanup schedule's
	// status for its metrics.
	healthEvery = 15 * time.Second
)

// worker is the Restate service endpoint with its database.
type worker struct {
	cfg     config
	logger  *slog.Logger
	sqlDB   *sql.DB
	handler http.Handler
	client  *http.Client
	health  *scheduleHealth
	// healthEvery is how often health is read: healthEvery, shorter in
	// tests.
	healthEvery time.Duration
}

// newWorker wires the handlers. It starts nothing.
func newWorker(cfg config, logger *slog.Logger) (*worker, error) {
	// A cleanup run and a drain step use one connection each.
	sqlDB, err := cmdutil.OpenMySQL(cfg.mysql, 4)
	if err != nil {
		return nil, err
	}
	q := db.New(sqlDB)
	// The SDK logs every request it refuses (one restate-server did not
	// sign): what anyone who reaches the port can send, so throttled (a
	// line a second after a burst of ten, with a count of what was
	// dropped).
	rs := server.NewRestate().WithLogger(cmdutil.Throttle(logger.Handler(), time.Second, 10), true)
	if len(cfg.IdentityKeys) > 0 {
		// Only restate-server, signing with the private half, may run a
		// job: the blocklist drain ends in DROP TABLE.
		rs = rs.WithIdentityV1(cfg.IdentityKeys...)
	} else {
		logger.Warn("no UNKEY_RESTATE_IDENTITY_KEYS configured: the worker runs any request that reaches it; " +
			"generate a key pair with `worker keygen` and give restate-server the private key")
	}
	h, err := rs.
		Bind(cleanup.Definition(q, cleanup.WithAuditRetention(cfg.AuditRetention))).
		Bind(blocklistdrain.Definition(q)).
		Handler()
	if err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("restate handler: %w", err)
	}
	w := &worker{cfg: cfg, logger: logger, sqlDB: sqlDB, client: &http.Client{Timeout: 10 * time.Second},
		health: newScheduleHealth(), healthEvery: healthEvery}
	// The Restate handler, and the schedule's health for Prometheus: a
	// scrape needs no request identity, and tells nothing a caller could
	// use.
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", w.health.handler())
	mux.Handle("/", h)
	w.handler = mux
	return w, nil
}

func (w *worker) close() error { return w.sqlDB.Close() }

// serve serves the handlers on ln (HTTP/2 without TLS, as Restate speaks
// it), registers the worker and starts the cleanup schedule, until ctx is
// done.
func (w *worker) serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: w.handler, Protocols: cmdutil.Protocols(), ReadHeaderTimeout: 5 * time.Second}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	w.logger.Info("serving restate handlers", "addr", ln.Addr().String(), "url", w.cfg.WorkerURL)
	g.Go(func() error {
		// Failures are logged and retried until gctx ends: a worker that
		// cannot register still serves restate-server's calls.
		if err := w.register(gctx); err == nil {
			w.startCleanup(gctx)
		}
		return nil
	})
	g.Go(func() error { w.watchHealth(gctx); return nil })
	g.Go(func() error {
		<-gctx.Done() // ctx ended, or the server failed
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			return fmt.Errorf("shut down: %w", err)
		}
		return nil
	})
	return g.Wait()
}

// register registers the worker's URL with the Restate admin API, retrying
// until it answers or ctx is done. Registering the same URL again is
// harmless: Restate keeps the deployment if its services did not change.
func (w *worker) register(ctx context.Context) error {
	body, _ := json.Marshal(map[string]any{"uri": w.cfg.WorkerURL})
	return w.retry(ctx, "register with restate", func() error {
		return w.post(ctx, strings.TrimSuffix(w.cfg.AdminURL, "/")+"/deployments", body)
	})
}

// startCleanup starts the retention schedule (cleanup.DefaultKey) through
// Restate's ingress, after stopping a schedule under the key it had before
// (cleanup.LegacyKey), so that a deployment upgraded from then runs one
// chain. Both are sent, not called: a call that waits behind a run retried
// during an outage (the object runs one handler at a time) answers the
// worker at once. Start carries an idempotency key, so that the worker's
// attempts, and every restart's, are one invocation, not a queue of them: a
// running schedule is left as it is. Stop carries none: stopping a stopped
// schedule changes nothing, and every start must stop a legacy chain an old
// worker (of a rolling upgrade) may have started since the last one, which
// a Stop deduplicated against the last start's would not.
func (w *worker) startCleanup(ctx context.Context) {
	base := strings.TrimSuffix(w.cfg.IngressURL, "/") + "/" + cleanup.ServiceName
	w.retry(ctx, "stop the schedule under its old key "+cleanup.LegacyKey, func() error {
		return w.post(ctx, base+"/"+cleanup.LegacyKey+"/Stop/send", nil)
	})
	w.retry(ctx, "start the retention schedule", func() error {
		return w.post(ctx, base+"/"+cleanup.DefaultKey+"/Start/send", []byte("{}"), "idempotency-key", startIdempotencyKey)
	})
}

// startIdempotencyKey makes every worker's Start of the schedule one
// invocation for as long as restate-server keeps the key (a day by
// default); a Start after that finds the schedule running and leaves it.
const startIdempotencyKey = "worker-start-cleanup"

func (w *worker) retry(ctx context.Context, what string, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil {
			w.logger.Info(what+": done", "attempts", attempt)
			return nil
		}
		w.logger.Warn(what+": retrying", "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryEvery):
		}
	}
}

// post posts body to url with header pairs.
func (w *worker) post(ctx context.Context, url string, body []byte, header ...string) error {
	_, err := w.postFor(ctx, url, body, header...)
	return err
}

// postFor posts body to url with header pairs and returns the answer.
func (w *worker) postFor(ctx context.Context, url string, body []byte, header ...string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if len(body) > 0 { // a handler without input takes no content type
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("POST %s: %s: %s", url, resp.Status, bytes.TrimSpace(msg[:min(len(msg), 2048)]))
	}
	return msg, nil
}

package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"connectrpc.com/grpchealth"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/ratelimit/redisstore"
)

// ShutdownTimeout bounds how long in-flight requests may take to finish
// after SIGTERM. Decisions take microseconds; the bound only matters for
// stuck clients. The limiter's final replay and flush come after it: see
// StopBudget, which a deployment's grace period must exceed.
const ShutdownTimeout = 15 * time.Second

// StopBudget is the longest a graceful stop takes: ShutdownTimeout for the
// requests in flight, then the final replay to Redis (at most 500 ms) and
// the final flush to MySQL (ratelimit.DefaultGlobalFlushTimeout), rounded
// up. A deployment's grace period must exceed it.
const StopBudget = ShutdownTimeout + time.Second + ratelimit.DefaultGlobalFlushTimeout

// A Loop is a background task of the process: the limiter's replays,
// flushes and syncs, the polls of overrides and keys, the rule and key
// files' rereads, the analytics' flushes. Run works until ctx ends and then
// returns nil; an error is a failure that stops the process.
type Loop interface {
	Run(ctx context.Context) error
}

// load is a first read a loop's store gets before the process reports
// ready, so that a restarted process applies what the store holds from its
// first request. A load that fails is logged with warning and leaves the
// work to the loop's next poll: a database that does not answer is no
// reason not to serve.
type load struct {
	from    interface{ Load(context.Context) error }
	warning string
}

// Serve serves on ln (and gRPC over grpc-go on grpcLn, unless it is nil)
// until ctx ends or a server fails, then stops taking new work, lets
// in-flight requests finish (up to ShutdownTimeout), and only then stops
// the loops, so that the limiter's final replay and flush carry the last
// requests; last it closes the stores' clients. One errgroup runs it all:
// the servers, the loops and the shutdown that orders them.
func (d *Daemon) Serve(ctx context.Context, ln, grpcLn net.Listener) error {
	srv := d.limits().HTTPServer(d.Handler())
	// net/http logs each malformed connection: what any client can send,
	// so throttled (a line a second after a burst of ten, with a count of
	// what was dropped).
	srv.ErrorLog = slog.NewLogLogger(cmdutil.Throttle(d.logger.Handler(), time.Second, 10), slog.LevelWarn)

	// The loops outlive ctx: they stop once the servers have.
	loopsCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLoops()
	g, gctx := errgroup.WithContext(ctx)
	// Each load before traffic (/readyz answers 503 until they are done);
	// a SIGTERM stops a load within one page, and the process then stops.
	for _, l := range d.loads {
		if err := l.from.Load(ctx); err != nil {
			d.logger.Warn(l.warning, "error", err)
		}
	}
	for _, l := range d.loops {
		g.Go(func() error { return l.Run(loopsCtx) })
	}
	if d.open() {
		d.logger.Warn("no keys configured (UNKEY_AUTH_TOKENS, UNKEY_AUTH_KEYS_FILE, or a key in MySQL): the API is open " +
			"and every caller shares the workspace " + access.OpenWorkspace)
	}
	// The cluster's map of nodes before the first request, so that a master
	// that dies later is replaced by a replica the client knows of (see
	// redisstore.Warm). A Redis that does not answer is no reason not to
	// serve: decisions are local until it does.
	if d.redis != nil {
		warmCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := redisstore.Warm(warmCtx, d.redis); err != nil {
			d.logger.Warn("redis does not answer: serving on local decisions until it does", "error", err)
		}
		cancel()
	}
	g.Go(func() error {
		ln := transport.LimitListener(ln, d.cfg.HTTPMaxConnections)
		serve := func() error { return srv.Serve(ln) }
		if d.tls != nil {
			srv.TLSConfig = d.tls.Config()
			var p http.Protocols
			p.SetHTTP1(true)
			p.SetHTTP2(true)
			srv.Protocols = &p
			serve = func() error { return srv.ServeTLS(ln, "", "") }
		}
		if err := serve(); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	})
	var grpcSrv *grpc.Server
	var grpcHealth *health.Server
	if grpcLn != nil {
		g2, hs := d.grpcServer()
		grpcSrv, grpcHealth = g2, hs
		defer hs.Shutdown()
		go d.serveWhenReady(gctx, hs)
		limited := transport.LimitListener(grpcLn, d.cfg.GRPCMaxConnections)
		g.Go(func() error {
			// A shutdown that comes before Serve starts stops the server
			// first: Serve then answers ErrServerStopped, a clean stop.
			if err := g2.Serve(limited); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				return fmt.Errorf("serve grpc: %w", err)
			}
			return nil
		})
		d.logger.Info("serving gRPC over grpc-go", "addr", grpcLn.Addr().String())
	}
	d.ready.Store(true)
	d.logger.Info("serving", "addr", ln.Addr().String(), "region", d.limiter.Region())

	g.Go(func() error {
		<-gctx.Done() // ctx ended, or a server failed
		d.ready.Store(false)
		for _, name := range d.services() {
			d.health.SetStatus(name, grpchealth.StatusNotServing)
		}
		if grpcHealth != nil {
			// Not serving from now on, on the grpc-go port too, while
			// its calls drain: Shutdown ignores a later SERVING.
			grpcHealth.Shutdown()
		}
		d.logger.Info("shutting down")
		shutdownCtx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		var err error
		// Envoy's quota streams first: each is told its assignments
		// expire now (its Envoy falls back to its own behaviour, then
		// reconnects elsewhere) and ends; the servers would otherwise
		// wait for them to the end of the timeout. One whose Envoy does
		// not take it is ended without it (its Envoy's assignments run
		// to their time to live): no failure of the stop.
		if qerr := d.quota.Drain(shutdownCtx); qerr != nil {
			d.logger.Warn("some quota streams were ended without their expiry", "error", qerr)
		}
		if serr := srv.Shutdown(shutdownCtx); serr != nil {
			err = fmt.Errorf("shut down http server: %w", serr)
		}
		if grpcSrv != nil {
			stopped := make(chan struct{})
			go func() { grpcSrv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-shutdownCtx.Done():
				grpcSrv.Stop()
				err = errors.Join(err, fmt.Errorf("shut down grpc server: %w", shutdownCtx.Err()))
			}
		}
		stopLoops() // after the last request: the final flush carries it
		return err
	})
	return errors.Join(g.Wait(), d.close())
}

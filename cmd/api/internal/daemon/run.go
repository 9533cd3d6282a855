package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/internal/cmdutil"
)

// Run starts the API with the configuration in environ, logging to logOut,
// and serves until ctx ends or the process gets SIGTERM or SIGINT.
func Run(ctx context.Context, environ []string, logOut io.Writer) error {
	cfg, err := LoadConfig(environ)
	if err != nil {
		return err
	}
	logger := cfg.Log.Logger(logOut)
	redis.SetLogger(RedisLogger{logger})
	cmdutil.RouteMySQLLogs(logger)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	d, err := New(cfg, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return errors.Join(fmt.Errorf("listen on UNKEY_HTTP_ADDR %s: %w", cfg.HTTPAddr, err), d.close())
	}
	var grpcLn net.Listener
	if cfg.GRPCAddr != "" {
		if grpcLn, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			ln.Close()
			return errors.Join(fmt.Errorf("listen on UNKEY_GRPC_ADDR %s: %w", cfg.GRPCAddr, err), d.close())
		}
	}
	return d.Serve(ctx, ln, grpcLn)
}

// RedisLogger sends go-redis's own messages (such as failed dials, which
// the limiter already counts in its metrics) to the debug log. go-redis
// has one logger per process: Run sets it; tests set one that discards.
type RedisLogger struct{ Logger *slog.Logger }

// Printf logs one of go-redis's messages at debug level.
func (l RedisLogger) Printf(ctx context.Context, format string, args ...any) {
	l.Logger.DebugContext(ctx, fmt.Sprintf(format, args...), "component", "go-redis")
}

// sideServer serves an operator's routes on an address of their own (Go's
// profiles on UNKEY_DEBUG_ADDR, the metrics on UNKEY_METRICS_ADDR): a
// Loop, started and stopped with the others.
type sideServer struct {
	setting, addr, what string // the variable that names addr, and what is served
	handler             http.Handler
	logger              *slog.Logger
	// start and stop, if set, run when serving begins and ends.
	start, stop func()
}

// debugServer serves Go's profiles on addr; with contention, the mutex
// and block profiles sample while it serves.
func debugServer(addr string, contention bool, logger *slog.Logger) sideServer {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	s := sideServer{setting: "UNKEY_DEBUG_ADDR", addr: addr, what: "profiles", handler: mux, logger: logger}
	if contention {
		// The runtime's rates are the process's: set while the profiles
		// are served, and back to none after.
		s.start = func() {
			runtime.SetMutexProfileFraction(100)
			runtime.SetBlockProfileRate(int((10 * time.Microsecond).Nanoseconds()))
		}
		s.stop = func() {
			runtime.SetMutexProfileFraction(0)
			runtime.SetBlockProfileRate(0)
		}
	}
	return s
}

// Run serves until ctx ends, then returns nil; an address it cannot
// listen on is an error that stops the process.
func (s sideServer) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen on %s %s: %w", s.setting, s.addr, err)
	}
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	if s.start != nil {
		s.start()
		defer s.stop()
	}
	s.logger.Info("serving "+s.what, "addr", ln.Addr().String())
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", s.what, err)
	}
	return nil
}

// Command api serves the rate limiter over Connect: Connect JSON (curl),
// gRPC and gRPC-Web on one port, over HTTP/1.1 and h2c, with gRPC reflection
// and health, /healthz, /readyz and /metrics.
//
// Configuration comes from the environment; see README.md.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	if err := run(context.Background(), os.Environ(), os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

// run starts the API with the configuration in environ and serves until
// SIGTERM or SIGINT.
func run(ctx context.Context, environ []string, logOut io.Writer) error {
	cfg, err := loadConfig(environ)
	if err != nil {
		return err
	}
	logger := slog.New(cfg.logHandler(logOut))
	redis.SetLogger(redisLogger{logger})
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv, err := newServer(cfg, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on UNKEY_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	return srv.serve(ctx, ln)
}

// redisLogger sends go-redis's own messages (such as failed dials, which the
// limiter already counts in its metrics) to the debug log.
type redisLogger struct{ logger *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, args ...any) {
	l.logger.DebugContext(ctx, fmt.Sprintf(format, args...), "component", "go-redis")
}

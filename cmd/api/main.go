// Command api serves the rate limiter over Connect: Connect JSON (curl),
// gRPC and gRPC-Web on one port, over HTTP/1.1 and h2c, with gRPC reflection
// and health, /healthz, /readyz and /metrics.
//
// Configuration comes from the environment; see README.md.
//
// Usage:
//
//	api                      serve the API
//	api migrate              apply the MySQL schema to UNKEY_MYSQL_DSN (idempotent) and exit
//	api rls check PATH...    check envoyproxy/ratelimit config files or directories, as
//	                         UNKEY_RLS_CONFIG would load them, and exit 1 if any is broken
//	api keys create ...      create a key in MySQL (see api keys for the flags)
//	api keys generate ...    generate a key for UNKEY_AUTH_KEYS_FILE
//	api --version            print the version and the commit (see internal/version)
//	api --help               the commands and every setting, with its default
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/internal/envconfig"
	"github.com/unkeyed/ratelimit/internal/telemetry"
	"github.com/unkeyed/ratelimit/internal/version"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// usage is api's commands, which --help prints before its settings.
const usage = `api: the rate limiter's API server (see README.md)

Usage:
  api                                  serve, configured by the settings below
  api migrate                          apply the MySQL schema to UNKEY_MYSQL_DSN (idempotent)
  api rls check PATH...                check envoyproxy/ratelimit rule files or directories
  api keys create --workspace W --name N --permissions P,... [--expires-at RFC3339]
                                       create a key in MySQL (UNKEY_MYSQL_DSN); prints it once
  api keys generate --workspace W --name N --permissions P,...
                                       print a keys-file entry and its key
  api --version                        print the version and the commit
  api --help                           this text
`

func main() {
	var err error
	switch args := os.Args[1:]; {
	case len(args) == 0:
		err = run(context.Background(), os.Environ(), os.Stderr)
	case len(args) == 1 && args[0] == "migrate":
		err = migrate(context.Background(), os.Environ())
	case len(args) >= 3 && args[0] == "rls" && args[1] == "check":
		err = rlsCheck(os.Stdout, args[2:])
	case len(args) >= 1 && args[0] == "keys":
		err = keysCommand(context.Background(), os.Environ(), os.Stdout, os.Stderr, args[1:])
	case len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version"):
		fmt.Println(version.String("api"))
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
		help(os.Stdout)
	default:
		err = fmt.Errorf("unknown arguments %q; see api --help", args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

// help writes --help: the commands, the settings of config and the OTEL_*
// variables of tracing, each with the default the program uses.
func help(w io.Writer) {
	envconfig.Usage(w, usage, config{}, telemetry.Settings(tracingService))
}

// migrate applies the schema to the database UNKEY_MYSQL_DSN names.
func migrate(ctx context.Context, environ []string) error {
	dsn := lookupEnv(environ, "UNKEY_MYSQL_DSN")
	if dsn == "" {
		return fmt.Errorf("migrate: UNKEY_MYSQL_DSN is not set")
	}
	cfg, err := cmdutil.ParseMySQLDSN(dsn)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	sqlDB, err := cmdutil.OpenMySQL(cfg, mysqlConns)
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := db.Migrate(ctx, sqlDB); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Println("schema applied to", cfg.Addr+"/"+cfg.DBName)
	return nil
}

// run starts the API with the configuration in environ and serves until
// SIGTERM or SIGINT.
func run(ctx context.Context, environ []string, logOut io.Writer) error {
	cfg, err := loadConfig(environ)
	if err != nil {
		return err
	}
	logger := cfg.Log.Logger(logOut)
	redis.SetLogger(redisLogger{logger})
	cmdutil.RouteMySQLLogs(logger)
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
	var grpcLn net.Listener
	if cfg.GRPCAddr != "" {
		if grpcLn, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			return fmt.Errorf("listen on UNKEY_GRPC_ADDR %s: %w", cfg.GRPCAddr, err)
		}
	}
	if cfg.DebugAddr != "" {
		stopDebug, err := serveDebug(cfg.DebugAddr, logger)
		if err != nil {
			return err
		}
		defer stopDebug()
	}
	return srv.serve(ctx, ln, grpcLn)
}

// redisLogger sends go-redis's own messages (such as failed dials, which the
// limiter already counts in its metrics) to the debug log.
type redisLogger struct{ logger *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, args ...any) {
	l.logger.DebugContext(ctx, fmt.Sprintf(format, args...), "component", "go-redis")
}

// serveDebug serves Go's profiles on addr until the returned function is
// called.
func serveDebug(addr string, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on UNKEY_DEBUG_ADDR %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	logger.Info("serving profiles", "addr", ln.Addr().String())
	return func() { srv.Close() }, nil
}

// rlsCheck compiles each path as UNKEY_RLS_CONFIG would load it, prints
// what it holds or why it is refused, and fails if any path is refused: for
// users' CI, before a file reaches the service.
func rlsCheck(out io.Writer, paths []string) error {
	failed := 0
	for _, path := range paths {
		c, err := rlsconfig.LoadPath(path)
		if err != nil {
			fmt.Fprintf(out, "FAIL %v\n", err)
			failed++
			continue
		}
		domains, rules := c.Domains()
		fmt.Fprintf(out, "ok   %s: %d domains, %d rules\n", path, domains, rules)
	}
	if failed > 0 {
		return fmt.Errorf("rls check: %d of %d paths refused", failed, len(paths))
	}
	return nil
}

// Command worker is the Restate service endpoint that hosts the rate
// limiter's durable background jobs: the retention schedule, which deletes
// expired window counts, override tombstones, old audit entries, settled
// reservations' records, old analytics and the roll call of processes long
// gone, and rolls the analytics up (workflows/cleanup); and the staged retirement of the legacy
// ratelimit_blocklist table (workflows/blocklistdrain).
//
// On start it serves the handlers (h2c), registers itself with the Restate
// admin API (idempotent; it retries until the admin API answers), stops a
// schedule under the key workers used before and starts the retention
// schedule if none is running. Configuration comes from the environment;
// see docs/worker.md.
//
// Usage:
//
//	worker                   serve the handlers
//	worker keygen FILE       write a request identity private key for
//	                         restate-server to FILE (unless one is there) and
//	                         its public key to FILE.pub, and print the public
//	                         key for UNKEY_RESTATE_IDENTITY_KEYS
//	worker config check      check the settings in the environment and the address, and exit
//	                         (--static: binds nothing)
//	worker --version         print the version and the commit (see internal/version)
//	worker --help            the commands and every setting, with its default
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/internal/envconfig"
	"github.com/unkeyed/ratelimit/internal/restateid"
	"github.com/unkeyed/ratelimit/internal/version"
)

// usage is worker's commands, which --help prints before its settings.
const usage = `worker: the rate limiter's Restate worker (see docs/worker.md; every setting: docs/settings.md)

Usage:
  worker                   serve the handlers, register with restate-server, start the schedule
  worker keygen FILE       write a request identity private key for restate-server to FILE
                           (unless one is there) and its public key to FILE.pub
  worker config check [--static]
                           check the settings below as serving reads them, and that its
                           address can be bound; exit 1 naming the first that breaks a
                           rule (--static: binds nothing, for manifests checked elsewhere;
                           the identity key file is read either way)
  worker --version         print the version and the commit
  worker --help            this text

Tracing: the worker exports no traces, and reads no OTEL_* variable.
`

func main() {
	var err error
	switch args := os.Args[1:]; {
	case len(args) == 0:
		err = run(context.Background(), os.Environ(), os.Stderr)
	case len(args) >= 2 && len(args) <= 3 && args[0] == "config" && args[1] == "check" && (len(args) == 2 || args[2] == "--static"):
		err = configCheck(os.Stdout, os.Environ(), len(args) == 3)
	case len(args) == 2 && args[0] == "keygen":
		err = keygen(args[1])
	case len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version"):
		fmt.Println(version.String("worker"))
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
		envconfig.Usage(os.Stdout, usage, config{})
	default:
		err = fmt.Errorf("unknown arguments %q; see worker --help", args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// configCheck reads the settings in environ as serving reads them (the
// identity key file included) and says, on out, what the worker would do
// with them; an error names the first setting that breaks a rule. Unless
// static, it also binds the worker's address and lets it go, as serving
// does at start. It opens no connection.
func configCheck(out io.Writer, environ []string, static bool) error {
	cfg, err := loadConfig(environ)
	if err != nil {
		return fmt.Errorf("config check: %w", err)
	}
	if !static {
		l, err := net.Listen("tcp", cfg.WorkerAddr)
		if err != nil {
			return fmt.Errorf("config check: UNKEY_WORKER_ADDR: cannot listen on %s: %w", cfg.WorkerAddr, err)
		}
		l.Close()
	}
	fmt.Fprintf(out, "ok: serves Restate's handlers on %s, registers %s with %s, starts its schedule through %s\n",
		cfg.WorkerAddr, cfg.WorkerURL, cfg.AdminURL, cfg.IngressURL)
	return nil
}

// keygen writes a new request identity private key for restate-server to
// path (keeping one already there) and its public key to path.pub, and
// prints the public key, for UNKEY_RESTATE_IDENTITY_KEYS.
func keygen(path string) error {
	pub, err := restateid.WriteKeyFile(path)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	fmt.Println(pub)
	return nil
}

// run starts the worker with the configuration in environ and serves until
// SIGTERM or SIGINT.
func run(ctx context.Context, environ []string, logOut io.Writer) error {
	cfg, err := loadConfig(environ)
	if err != nil {
		return err
	}
	logger := cfg.Log.Logger(logOut)
	cmdutil.RouteMySQLLogs(logger)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	w, err := newWorker(cfg, logger)
	if err != nil {
		return err
	}
	defer w.close()
	ln, err := net.Listen("tcp", cfg.WorkerAddr)
	if err != nil {
		return fmt.Errorf("listen on UNKEY_WORKER_ADDR %s: %w", cfg.WorkerAddr, err)
	}
	return w.serve(ctx, ln)
}

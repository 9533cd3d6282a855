// Command api is the rate limiter's API server. With no arguments it serves
// the limiter over every protocol the service speaks (Connect JSON, gRPC
// and gRPC-Web on one port, Unkey's v2 API, Envoy's rate limit service, on
// grpc-go too if asked), with health, readiness, metrics and the dashboard;
// package daemon builds and runs the process, configured by the
// environment (see docs/configuration.md, docs/settings.md and api --help). The other commands manage
// what the server reads: its schema, its rule files, its keys.
//
// Usage:
//
//	api                      serve the API
//	api migrate              apply the MySQL schema to UNKEY_MYSQL_DSN (idempotent) and exit
//	api rls check PATH...    check envoyproxy/ratelimit config files or directories, as
//	                         UNKEY_RLS_CONFIG would load them (with the environment's
//	                         UNKEY_RLS_* rule settings), and exit 1 if any is broken
//	api keys create ...      create a key in MySQL (see api keys for the flags)
//	api keys generate ...    generate a key for UNKEY_AUTH_KEYS_FILE
//	api config check         check the settings in the environment, the files they name
//	                         and the addresses they bind, and exit (--static: binds nothing,
//	                         reads only the files a setting is parsed from)
//	api --version            print the version and the commit (see internal/version)
//	api --help               the commands and every setting, with its default
//
// Started as ratelimit (the image's /bin/ratelimit), it serves with
// envoyproxy/ratelimit's environment read into its settings (package
// upstreamenv): the image Envoy Gateway deploys.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/unkeyed/ratelimit/cmd/api/internal/command"
	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
	"github.com/unkeyed/ratelimit/cmd/api/internal/upstreamenv"
	"github.com/unkeyed/ratelimit/internal/envconfig"
	"github.com/unkeyed/ratelimit/internal/telemetry"
	"github.com/unkeyed/ratelimit/internal/version"
)

// usage is api's commands, which --help prints before its settings.
const usage = `api: the rate limiter's API server (see README.md; every setting: docs/settings.md)

Usage:
  api                                  serve, configured by the settings below
  api migrate                          apply the MySQL schema to UNKEY_MYSQL_DSN (idempotent)
  api rls check PATH...                check envoyproxy/ratelimit rule files or directories, compiled
                                       with the UNKEY_RLS_* rule settings below
  api keys create --workspace W --name N --permissions P,... [--expires-at RFC3339]
                                       create a key in MySQL (UNKEY_MYSQL_DSN); prints it once
  api keys generate --workspace W --name N --permissions P,...
                                       print a keys-file entry and its key
  api config check [--static]          check the settings below as serving reads them, the
                                       files they name and that their addresses can be bound;
                                       exit 1 naming the first that breaks a rule (--static:
                                       binds nothing and reads only the files a setting is
                                       parsed from, for manifests checked elsewhere)
  api --version                        print the version and the commit
  api --help                           this text
`

func main() {
	var err error
	environ := os.Environ()
	var origins upstreamenv.Origins
	if filepath.Base(os.Args[0]) == "ratelimit" {
		// The image's /bin/ratelimit, where envoyproxy/ratelimit was
		// deployed: its environment, read into this service's settings
		// (for serving and for config check alike). An error then names
		// a setting by the variables it was read from.
		if environ, origins, err = upstreamenv.Translate(environ); err != nil {
			fmt.Fprintln(os.Stderr, "ratelimit:", err)
			os.Exit(1)
		}
	}
	switch args := os.Args[1:]; {
	case len(args) == 0:
		err = daemon.Run(context.Background(), environ, os.Stderr)
	case len(args) == 1 && args[0] == "migrate":
		err = command.Migrate(context.Background(), os.Environ(), os.Stdout)
	case len(args) >= 3 && args[0] == "rls" && args[1] == "check":
		err = command.RLSCheck(os.Stdout, environ, args[2:])
	case len(args) >= 2 && len(args) <= 3 && args[0] == "config" && args[1] == "check" && (len(args) == 2 || args[2] == "--static"):
		err = command.ConfigCheck(os.Stdout, environ, len(args) == 3)
	case len(args) >= 1 && args[0] == "keys":
		err = command.Keys(context.Background(), os.Environ(), os.Stdout, os.Stderr, args[1:])
	case len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version"):
		fmt.Println(version.String("api"))
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
		help(os.Stdout)
	default:
		err = fmt.Errorf("unknown arguments %q; see api --help", args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "api:", origins.Explain(err))
		os.Exit(1)
	}
}

// help writes --help: the commands, the settings of config and the OTEL_*
// variables of tracing, each with the default the program uses.
func help(w io.Writer) {
	envconfig.Usage(w, usage, daemon.Config{}, telemetry.Settings(daemon.TracingService))
}

package command

import (
	"fmt"
	"io"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
)

// ConfigCheck reads the settings in environ as serving reads them and
// says, on out, what the process would do with them; an error names the
// first setting that breaks a rule. Unless static, it also reads every
// file a setting names and binds every address, as serving does at start
// (see daemon.Preflight): run where the process will run, before a
// rollout, it meets every file and address error the start would. It
// connects to no store and no xDS server. Static, it binds nothing and
// reads only the files a setting is parsed from (Redis's TLS files): for
// a deployment's manifests
// checked on another machine, and for the tests that hold the chart and
// compose.yaml to the binary.
func ConfigCheck(out io.Writer, environ []string, static bool) error {
	cfg, err := daemon.LoadConfig(environ)
	if err != nil {
		return fmt.Errorf("config check: %w", err)
	}
	if !static {
		if err := daemon.Preflight(cfg); err != nil {
			return fmt.Errorf("config check: %w", err)
		}
	}
	grpc := "not served"
	if cfg.GRPCAddr != "" {
		grpc = cfg.GRPCAddr
	}
	fmt.Fprintf(out, "ok: region %s, HTTP on %s, gRPC (grpc-go) %s; a graceful stop takes at most %s\n",
		cfg.Region, cfg.HTTPAddr, grpc, daemon.StopBudget)
	return nil
}

package command

import (
	"fmt"
	"io"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
)

// ConfigCheck reads the settings in environ as serving reads them and
// says, on out, what the process would do with them; an error names the
// first setting that breaks a rule. It opens nothing: no store, no file.
// For a deployment's CI, before a rollout, and for the tests that hold the
// chart and compose.yaml to the binary.
func ConfigCheck(out io.Writer, environ []string) error {
	cfg, err := daemon.LoadConfig(environ)
	if err != nil {
		return fmt.Errorf("config check: %w", err)
	}
	grpc := "not served"
	if cfg.GRPCAddr != "" {
		grpc = cfg.GRPCAddr
	}
	fmt.Fprintf(out, "ok: region %s, HTTP on %s, gRPC (grpc-go) %s; a graceful stop takes at most %s\n",
		cfg.Region, cfg.HTTPAddr, grpc, daemon.StopBudget)
	return nil
}

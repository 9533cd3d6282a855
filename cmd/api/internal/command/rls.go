package command

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// RLSCheck compiles each path as UNKEY_RLS_CONFIG would load it in a
// process of environ (its rule settings: UNKEY_RLS_CALENDAR_UNITS and
// UNKEY_RLS_TIME_ZONE, the UNKEY_RLS_MAX_ bounds), prints what it holds
// or why it is refused, and fails if any path is refused: for users' CI,
// before a file reaches the service. environ is read as the service reads
// it: a setting the service would refuse (misspelt, malformed, one of a
// pair) fails the check too; only UNKEY_REGION may be left out.
func RLSCheck(out io.Writer, environ []string, paths []string) error {
	// A check serves nothing: it needs no region, the one setting every
	// process must name.
	if !slices.ContainsFunc(environ, func(kv string) bool { return strings.HasPrefix(kv, "UNKEY_REGION=") }) {
		environ = append(slices.Clip(environ), "UNKEY_REGION=rls-check")
	}
	cfg, err := daemon.LoadConfig(environ)
	if err != nil {
		return fmt.Errorf("rls check: %w", err)
	}
	compiler := daemon.RulesCompiler(cfg)
	failed := 0
	for _, path := range paths {
		var c *rlsconfig.Config
		files, err := rlsconfig.ReadPath(path)
		if err == nil {
			c, err = compiler.Load(files...)
		}
		if err != nil {
			fmt.Fprintf(out, "FAIL %v\n", err)
			failed++
			continue
		}
		domains, rules := c.Domains()
		fmt.Fprintf(out, "ok   %s: %d domains, %d rules%s\n", path, domains, rules, models(c.Models()))
	}
	if failed > 0 {
		return fmt.Errorf("rls check: %d of %d paths refused", failed, len(paths))
	}
	return nil
}

// models says how many limits each model decides, "" when there are none:
// " (2 sliding_window, 1 token_bucket limits)".
func models(counts map[string]int) string {
	var parts []string
	for _, m := range []string{"sliding_window", "fixed_window", "token_bucket", "concurrency", "calendar"} {
		if n := counts[m]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, m))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (limits: " + strings.Join(parts, ", ") + ")"
}

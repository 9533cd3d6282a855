package command

import (
	"fmt"
	"io"
	"strings"

	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// RLSCheck compiles each path as UNKEY_RLS_CONFIG would load it with the
// default bounds and units as lengths (UNKEY_RLS_CALENDAR_UNITS and the
// UNKEY_RLS_MAX_ settings are not read), prints what it holds or why it
// is refused, and fails if any path is refused: for users' CI, before a
// file reaches the service.
func RLSCheck(out io.Writer, paths []string) error {
	failed := 0
	for _, path := range paths {
		c, err := rlsconfig.LoadPath(path)
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

package command

import (
	"fmt"
	"io"

	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// RLSCheck compiles each path as UNKEY_RLS_CONFIG would load it, prints
// what it holds or why it is refused, and fails if any path is refused: for
// users' CI, before a file reaches the service.
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
		fmt.Fprintf(out, "ok   %s: %d domains, %d rules\n", path, domains, rules)
	}
	if failed > 0 {
		return fmt.Errorf("rls check: %d of %d paths refused", failed, len(paths))
	}
	return nil
}

// Package envconfig reads a program's configuration struct from an
// environment given as KEY=value entries (as os.Environ returns them), so
// that tests can pass their own environment instead of touching the
// process's.
package envconfig

import (
	"strings"

	"github.com/caarlos0/env/v11"
)

// Parse fills v, a pointer to a struct with caarlos0/env tags, from environ.
// A missing required variable is an error that names it.
func Parse(environ []string, v any) error {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, val, _ := strings.Cut(kv, "=")
		vars[k] = val
	}
	return env.ParseWithOptions(v, env.Options{Environment: vars})
}

// Package envconfig reads a program's configuration struct from an
// environment given as KEY=value entries (as os.Environ returns them), so
// that tests can pass their own environment instead of touching the
// process's.
package envconfig

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/unkeyed/ratelimit/internal/spelling"
)

// Parse fills v, a pointer to a struct with caarlos0/env tags, from environ.
// A missing required variable is an error that names it; a value its
// setting's type cannot hold is an error that names the variable, what
// was set and what the setting takes.
func Parse(environ []string, v any) error {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, val, _ := strings.Cut(kv, "=")
		vars[k] = val
	}
	err := env.ParseWithOptions(v, env.Options{Environment: vars})
	if err == nil {
		return nil
	}
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err
	}
	names := fieldVars(v)
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if name, ok := names[pe.Name]; ok {
				return fmt.Errorf("%s: must be %s, got %q", name, expects(pe.Type), vars[name])
			}
		}
	}
	return err
}

// fieldVars returns the variable each field of v's struct is read from,
// by the field's name (caarlos0/env's errors name the field).
func fieldVars(v any) map[string]string {
	out := map[string]string{}
	for _, s := range Settings(v) {
		out[s.Field] = s.Name
	}
	return out
}

// expects says what a setting of type t takes, as its error says it.
func expects(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "a duration such as 500ms, 10s or 1h"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64, t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		return "a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	}
	return "a " + t.String()
}

// Unknown returns an error naming the first variable of environ (in
// name order) that starts with prefix and is none of known, and the
// known one nearest to it, a misspelling's likely target; nil if every
// such variable is known. A misspelled setting is otherwise read as
// unset, and its default serves where the operator meant another value.
func Unknown(environ []string, prefix string, known []string, allow string) error {
	var unknown []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, prefix) && !slices.Contains(known, k) && !ServiceLink(k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	k := unknown[0]
	best, _ := spelling.Nearest(k, known)
	more := ""
	if len(unknown) > 1 {
		more = fmt.Sprintf(" (and %d more unknown: %s)", len(unknown)-1, strings.Join(unknown[1:], ", "))
	}
	return fmt.Errorf("%s: no such setting; did you mean %s?%s See --help for every setting, or set %s=true to start anyway", k, best, more, allow)
}

// ServiceLink reports whether k is one of the variables Kubernetes sets in
// every pod for each Service of its namespace (NAME_SERVICE_HOST,
// NAME_SERVICE_PORT and NAME_SERVICE_PORT_PORTNAME, NAME_PORT and
// NAME_PORT_8080_TCP with its _PROTO, _PORT and _ADDR), which a Service
// named like the program (unkey-…) makes UNKEY_…: none is a setting.
func ServiceLink(k string) bool {
	return strings.HasSuffix(k, "_SERVICE_HOST") || strings.Contains(k, "_SERVICE_PORT") ||
		strings.HasSuffix(k, "_PORT") && k != "PORT" || strings.Contains(k, "_PORT_")
}

// Names returns the variables the configuration struct v reads.
func Names(v any) []string {
	var out []string
	for _, s := range Settings(v) {
		out = append(out, s.Name)
	}
	return out
}

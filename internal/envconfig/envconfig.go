// Package envconfig reads a program's configuration struct from an
// environment given as KEY=value entries (as os.Environ returns them), so
// that tests can pass their own environment instead of touching the
// process's.
package envconfig

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
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
// name order) that starts with prefix and is none of known (nor a
// Kubernetes service link), and the known one it is likely a misspelling
// of, where one is near (see spelling.Near); nil if every
// such variable is known. A misspelled setting is otherwise read as
// unset, and its default serves where the operator meant another value.
func Unknown(environ []string, prefix string, known []string, allow string) error {
	var unknown []string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, prefix) && !slices.Contains(known, k) && !ServiceLink(k, v) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	k := unknown[0]
	guess := ""
	if best, ok := spelling.Near(k, known); ok {
		guess = " did you mean " + best + "?"
	}
	more := ""
	if len(unknown) > 1 {
		more = fmt.Sprintf(" (and %d more unknown: %s)", len(unknown)-1, strings.Join(unknown[1:], ", "))
	}
	return fmt.Errorf("%s: no such setting;%s%s See --help for every setting, or set %s=true to start anyway", k, guess, more, allow)
}

// serviceLink matches the names of the variables Kubernetes sets in every
// pod for each Service of its namespace: NAME_SERVICE_HOST,
// NAME_SERVICE_PORT and NAME_SERVICE_PORT_PORTNAME, NAME_PORT, and
// NAME_PORT_8080_TCP with its _PROTO, _PORT and _ADDR.
var serviceLink = regexp.MustCompile(`_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT|PORT_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)$`)

// ServiceLink reports whether k=v is one of the variables Kubernetes sets
// in every pod for each Service of its namespace, which a Service named
// like the program (unkey-…) makes UNKEY_…: none is a setting. A bare
// NAME_PORT is one only with Kubernetes' value, tcp://, udp:// or
// sctp://…, so that a misspelled port setting is still caught.
func ServiceLink(k, v string) bool {
	m := serviceLink.FindStringSubmatch(k)
	if m == nil || k == m[0] {
		return false
	}
	if m[1] == "PORT" {
		return strings.HasPrefix(v, "tcp://") || strings.HasPrefix(v, "udp://") || strings.HasPrefix(v, "sctp://")
	}
	return true
}

// Names returns the variables the configuration struct v reads.
func Names(v any) []string {
	var out []string
	for _, s := range Settings(v) {
		out = append(out, s.Name)
	}
	return out
}

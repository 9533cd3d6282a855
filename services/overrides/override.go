package overrides

import (
	"fmt"
	"strings"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/overrides/store"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Override replaces the limit and duration of the requests whose identifier
// it matches (see [store.Override]).
type Override = store.Override

// Change is a state of an override as a store holds it (see
// [store.Change]).
type Change = store.Change

// ErrNotFound is returned for an override that does not exist.
var ErrNotFound = store.ErrNotFound

// CapacityError is returned by [Registry.Set] for a new override in a
// workspace that already holds Max live ones (see
// [WithMaxPerWorkspace]). Nothing is written. Replacing an override that
// exists is always allowed.
type CapacityError struct {
	Max int64
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("workspace holds %d overrides, the most allowed; delete one to set another", e.Max)
}

// PatternCapacityError is returned by [Registry.Set] for a new pattern in a
// namespace that already holds Max live patterns (see
// [WithMaxPatternsPerNamespace]), or, if Floating, Max patterns that begin
// and end with *. Nothing is written.
type PatternCapacityError struct {
	Max      int
	Floating bool
}

func (e *PatternCapacityError) Error() string {
	if e.Floating {
		return fmt.Sprintf("namespace holds %d patterns that begin and end with *, the most allowed: every decision tries each of them", e.Max)
	}
	return fmt.Sprintf("namespace holds %d override patterns, the most allowed; delete one to set another", e.Max)
}

// wildcard is the character that matches any run of characters.
const wildcard = '*'

// isPattern reports whether identifier holds a wildcard.
func isPattern(identifier string) bool { return strings.IndexByte(identifier, wildcard) >= 0 }

// validate reports the first field of o that breaks a rule, as a
// [*invalid.Error], or nil. The names follow the limiter's rules;
// the duration is a request's, and the limit a request's or 0, which blocks
// the identifiers the override matches (every request denied, nothing
// counted); the burst a token bucket's, or 0.
func validate(o *Override) error {
	if err := validateKey(o.Namespace, o.Identifier); err != nil {
		return err
	}
	if err := ratelimit.CheckLimit("limit", o.Limit, true); err != nil {
		return err
	}
	if o.Burst < 0 || o.Burst > ratelimit.MaxLimit {
		return &invalid.Error{Field: "burst", Rule: fmt.Sprintf("must be between 0 (a request's own) and %d", int64(ratelimit.MaxLimit))}
	}
	return ratelimit.CheckDuration("duration", o.Duration, ratelimit.MaxDuration)
}

// validateKey checks the namespace and identifier (a name or a pattern) of
// an override.
func validateKey(namespace, identifier string) error {
	if err := ratelimit.CheckName("namespace", namespace, ratelimit.MaxNameLength); err != nil {
		return err
	}
	if err := ratelimit.CheckName("identifier", identifier, ratelimit.MaxNameLength); err != nil {
		return err
	}
	if strings.Trim(identifier, string(wildcard)) == "" {
		// "*" alone would override the whole namespace: that is the
		// caller's own limit, not an override.
		return &invalid.Error{Field: "identifier", Rule: "must hold a character besides *"}
	}
	if strings.Count(identifier, string(wildcard)) > MaxWildcards {
		return &invalid.Error{Field: "identifier", Rule: fmt.Sprintf("must hold at most %d *", MaxWildcards)}
	}
	return nil
}

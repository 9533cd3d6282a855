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

// NamespaceSwitch is the identifier of the override that switches a whole
// namespace to shadow (see [store.NamespaceSwitch]).
const NamespaceSwitch = store.NamespaceSwitch

// isPattern reports whether identifier holds a wildcard: the namespace
// switch ("*" alone) is no pattern, but a namespace's setting, looked up
// beside its identifiers' overrides.
func isPattern(identifier string) bool {
	return identifier != NamespaceSwitch && strings.IndexByte(identifier, wildcard) >= 0
}

// validate reports the first field of o that breaks a rule, as a
// [*invalid.Error], or nil. The names follow the limiter's rules;
// the duration is a request's, and the limit a request's or 0, which blocks
// the identifiers the override matches (every request denied, nothing
// counted); the burst a token bucket's, or 0. A shadow override may leave
// limit, duration and burst unset (0): it keeps the requests' own limits,
// and only it may be the namespace switch ("*" alone).
func validate(o *Override) error {
	if err := validateKey(o.Namespace, o.Identifier); err != nil {
		return err
	}
	if o.Shadow && o.KeepsLimit() {
		if o.Limit != 0 || o.Burst != 0 {
			return &invalid.Error{Field: "duration", Rule: "missing: a shadow override with a limit or burst of its own needs its duration (without limit, duration and burst it keeps the requests' own)"}
		}
		return nil
	}
	if o.Identifier == NamespaceSwitch {
		return errStarAlone
	}
	if err := ratelimit.CheckLimit("limit", o.Limit, true); err != nil {
		return err
	}
	if o.Burst < 0 || o.Burst > ratelimit.MaxLimit {
		return &invalid.Error{Field: "burst", Rule: fmt.Sprintf("must be between 0 (a request's own) and %d", int64(ratelimit.MaxLimit))}
	}
	return ratelimit.CheckDuration("duration", o.Duration, ratelimit.MaxDuration)
}

// errStarAlone refuses "*" alone but as a namespace's switch: any other
// override of "*" would replace the whole namespace's limit, which is the
// caller's own limit, not an override.
var errStarAlone = &invalid.Error{Field: "identifier", Rule: `must hold a character besides * ("*" alone only in a shadow override without a limit, which switches the namespace to shadow)`}

// validateKey checks the namespace and identifier (a name, a pattern, or
// the namespace switch) of an override.
func validateKey(namespace, identifier string) error {
	if err := ratelimit.CheckName("namespace", namespace, ratelimit.MaxNameLength); err != nil {
		return err
	}
	if identifier == NamespaceSwitch {
		return nil
	}
	if err := ratelimit.CheckName("identifier", identifier, ratelimit.MaxNameLength); err != nil {
		return err
	}
	if strings.Trim(identifier, string(wildcard)) == "" {
		return errStarAlone
	}
	if strings.Count(identifier, string(wildcard)) > MaxWildcards {
		return &invalid.Error{Field: "identifier", Rule: fmt.Sprintf("must hold at most %d *", MaxWildcards)}
	}
	return nil
}

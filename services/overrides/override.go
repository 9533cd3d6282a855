package overrides

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Override replaces the limit and duration of the requests whose identifier
// it matches.
type Override struct {
	// ID names the override in answers (the overrideId of a decision).
	ID        string
	Workspace string
	Namespace string
	// Identifier is an identifier, or a pattern where * matches any run of
	// characters.
	Identifier string
	Limit      int64
	Duration   time.Duration
	// UpdatedAt is when the override last changed, in unix ms.
	UpdatedAt int64
}

// ErrNotFound is returned for an override that does not exist.
var ErrNotFound = errors.New("override not found")

// wildcard is the character that matches any run of characters.
const wildcard = '*'

// isPattern reports whether identifier holds a wildcard.
func isPattern(identifier string) bool { return strings.IndexByte(identifier, wildcard) >= 0 }

// Validate reports the first field of o that breaks a rule, as a
// [*ratelimit.ValidationError], or nil. The names follow the limiter's rules;
// the limit and duration are those of a request.
func (o *Override) Validate() error {
	probe := ratelimit.Request{Namespace: o.Namespace, Identifier: o.Identifier, Limit: o.Limit, Duration: o.Duration, Cost: 0}
	if err := probe.Validate(); err != nil {
		return err
	}
	if strings.Trim(o.Identifier, string(wildcard)) == "" && o.Identifier != "" {
		// "*" alone would override the whole namespace: that is the
		// caller's own limit, not an override.
		return &ratelimit.ValidationError{Field: "identifier", Rule: "must hold a character besides *"}
	}
	return nil
}

// ValidateKey reports whether namespace and identifier are valid names of an
// override to get or delete.
func ValidateKey(namespace, identifier string) error {
	o := Override{Namespace: namespace, Identifier: identifier, Limit: 1, Duration: ratelimit.MinDuration}
	return o.Validate()
}

// String describes o for logs.
func (o Override) String() string {
	return fmt.Sprintf("%s %s/%s/%s: %d per %s", o.ID, o.Workspace, o.Namespace, o.Identifier, o.Limit, o.Duration)
}

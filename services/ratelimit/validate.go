package ratelimit

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Bounds of a valid [Request]. Names and identifiers fit the 255-character
// columns of the global counter table; counts stay exact in a float64 (2^53),
// which is what JSON clients can represent.
const (
	MaxNameLength = 255
	MaxLimit      = 1 << 53
	MaxCost       = 1 << 53
	MinDuration   = time.Second
	MaxDuration   = 30 * 24 * time.Hour
	// MaxWindow is the longest window Service.Decide accepts: a year, the
	// longest unit of Envoy's rate limit rules (365 days), and one day to
	// spare. Callers of the API are held to MaxDuration by Validate; the
	// limiter's maths and stores hold durations to the millisecond in 64
	// bits, so a year costs nothing more than a day.
	MaxWindow = 366 * 24 * time.Hour
)

// ValidationError reports a request field that breaks a rule. Nothing is
// counted for a request that fails validation.
type ValidationError struct {
	// Field is the name of the offending field, such as "identifier" or
	// "limits[2].cost".
	Field string
	// Rule says what the field must be.
	Rule string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Rule }

// Validate reports the first field of r that breaks a rule, or nil. The
// workspace is not checked: it comes from the caller's credentials, not from
// the request.
func (r *Request) Validate() error { return r.validate(MaxDuration) }

// ValidateWithin is Validate with maxDuration, at most [MaxWindow], as the
// longest duration.
func (r *Request) ValidateWithin(maxDuration time.Duration) error {
	return r.validate(min(maxDuration, MaxWindow))
}

// validate is Validate with maxDuration as the longest duration.
func (r *Request) validate(maxDuration time.Duration) error {
	if rule := checkName(r.Namespace); rule != "" {
		return &ValidationError{Field: "namespace", Rule: rule}
	}
	if rule := checkName(r.Identifier); rule != "" {
		return &ValidationError{Field: "identifier", Rule: rule}
	}
	if r.Limit < 1 || r.Limit > MaxLimit {
		return &ValidationError{Field: "limit", Rule: fmt.Sprintf("must be between 1 and %d", int64(MaxLimit))}
	}
	if r.Duration < MinDuration || r.Duration > maxDuration {
		return &ValidationError{Field: "duration", Rule: fmt.Sprintf("must be between %d and %d milliseconds",
			MinDuration.Milliseconds(), maxDuration.Milliseconds())}
	}
	if r.Cost < 0 || r.Cost > MaxCost {
		return &ValidationError{Field: "cost", Rule: fmt.Sprintf("must be between 0 and %d", int64(MaxCost))}
	}
	return nil
}

// ValidateBatch reports the first request of a batch that breaks a rule,
// naming it by its place (such as "limits[2].cost"), or a batch that holds
// no request or more than [MaxBatch].
func ValidateBatch(reqs []Request) error { return ValidateEach(reqs, MaxBatch) }

// ValidateEach is ValidateBatch for a list of at most max requests.
func ValidateEach(reqs []Request, max int) error {
	if len(reqs) == 0 || len(reqs) > max {
		return &ValidationError{Field: "limits", Rule: fmt.Sprintf("must hold 1 to %d limits", max)}
	}
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			var ve *ValidationError
			if errors.As(err, &ve) {
				return &ValidationError{Field: fmt.Sprintf("limits[%d].%s", i, ve.Field), Rule: ve.Rule}
			}
			return err
		}
	}
	return nil
}

// checkName returns the rule s breaks as a namespace or identifier, or "".
func checkName(s string) string {
	const rule = "must be 1 to 255 characters of valid UTF-8 without control characters"
	if len(s) == 0 {
		return rule
	}
	// Fast path: printable ASCII, the common case, is one byte a character.
	ascii := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f {
			return rule
		}
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		if len(s) > MaxNameLength {
			return rule
		}
		return ""
	}
	n := 0
	for i, c := range s {
		if c == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return rule
			}
		}
		// C0, DEL and C1 controls (unicode.IsControl without the table lookup).
		if c < 0x20 || (c >= 0x7f && c < 0xa0) {
			return rule
		}
		n++
	}
	if n > MaxNameLength {
		return rule
	}
	return ""
}

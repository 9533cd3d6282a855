package main

import (
	"errors"
	"fmt"

	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// exhaustedMessage returns what a client reads when one of the service's
// caps refused its request, and whether err is such a refusal: the same
// words on every route, each naming the cap and what frees room under it.
// The routes wrap it in their own shape (resource_exhausted, 429).
func exhaustedMessage(err error) (string, bool) {
	var pe *overrides.PatternCapacityError
	var oe *overrides.CapacityError
	var ce *ratelimit.CapacityError
	switch {
	case errors.As(err, &pe) && pe.Floating:
		return fmt.Sprintf("too many patterns that begin and end with *: this namespace holds %d, the most allowed, "+
			"since every decision of the namespace tries each of them", pe.Max), true
	case errors.As(err, &pe):
		return fmt.Sprintf("too many override patterns: this namespace holds %d, the most "+
			"UNKEY_MAX_OVERRIDE_PATTERNS_PER_NAMESPACE allows; delete one to set another", pe.Max), true
	case errors.As(err, &oe):
		return fmt.Sprintf("too many overrides: this workspace holds %d, the most UNKEY_MAX_OVERRIDES_PER_WORKSPACE allows; "+
			"delete one to set another", oe.Max), true
	case errors.As(err, &ce):
		return fmt.Sprintf("too many active windows: this workspace holds %d, the most UNKEY_MAX_WINDOWS_PER_WORKSPACE allows; "+
			"a window is freed once no request has used it for two of its durations", ce.Max), true
	}
	return "", false
}

// Package failure sorts what went wrong with a request, whatever its
// protocol, into a [Kind] each adapter maps to its own code or status, with
// the message the caller is told. It knows the errors of the domain (an
// invalid argument, a denial, a cap, a settled reservation) and nothing of
// the layers that answer them: the transport, the pipeline and every
// adapter import it, and it imports none of them.
package failure

import (
	"context"
	"errors"
	"fmt"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/penalties"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/reservation"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// Kind is what went wrong with a request, whatever its protocol: each
// adapter maps a kind to its own code or status, and words it its own way.
type Kind int

// The kinds of failure.
const (
	// KindInternal is a failure inside the server; its detail is for the
	// log, not the caller.
	KindInternal Kind = iota
	// KindInvalidArgument is a request that breaks a rule: Failure.Field
	// and Failure.Rule say which.
	KindInvalidArgument
	// KindUnauthenticated is a missing or unknown bearer token.
	KindUnauthenticated
	// KindNotFound is an override that does not exist.
	KindNotFound
	// KindResourceExhausted is a request refused by a cap (windows,
	// overrides, patterns) or by the decode budget; the message names it.
	KindResourceExhausted
	// KindCanceled and KindDeadlineExceeded are a caller gone or out of
	// time.
	KindCanceled
	KindDeadlineExceeded
	// KindPermissionDenied is a known key that lacks the permission a
	// request needs; the message names it.
	KindPermissionDenied
	// KindUnavailable is a request the process cannot answer yet: its
	// keys, or the rules of Envoy's protocol from xDS, have not been
	// loaded since it started.
	KindUnavailable
	// KindConflict is a request that repeats what was done once and may
	// be done only once: a reservation settled before.
	KindConflict
)

// Failure is an error classified for a caller.
type Failure struct {
	Kind Kind
	// Message says what went wrong, for the caller (empty for
	// KindInternal: adapters answer a generic message and log Err).
	Message string
	// Field and Rule are set for KindInvalidArgument.
	Field, Rule string
	// Err is the error classified.
	Err error
}

// JSONMessage is Message with an invalid field named as a route that
// speaks JSON names it (see invalid.InJSON): "calendar.timeZone", not
// "calendar.time_zone".
func (f Failure) JSONMessage() string {
	if f.Kind == KindInvalidArgument && f.Field != "" {
		return invalid.InJSON(f.Field) + ": " + f.Rule
	}
	return f.Message
}

// Classify sorts err, from any step of a request (the transport, the
// pipeline, the limiter, the overrides, keys and reservations), into a
// Failure.
func Classify(err error) Failure {
	var ve *invalid.Error
	if errors.As(err, &ve) {
		return Failure{Kind: KindInvalidArgument, Message: ve.Error(), Field: ve.Field, Rule: ve.Rule, Err: err}
	}
	if errors.Is(err, access.ErrMissingToken) || errors.Is(err, access.ErrUnknownToken) || errors.Is(err, access.ErrExpiredToken) {
		return Failure{Kind: KindUnauthenticated, Message: err.Error(), Err: err}
	}
	var de *access.DeniedError
	if errors.As(err, &de) {
		return Failure{Kind: KindPermissionDenied, Message: de.Error(), Err: err}
	}
	if errors.Is(err, access.ErrKeysNotLoaded) || errors.Is(err, reservation.ErrUnavailable) || errors.Is(err, rlsconfig.ErrNoConfig) {
		return Failure{Kind: KindUnavailable, Message: err.Error(), Err: err}
	}
	var se *reservation.SettledError
	if errors.As(err, &se) {
		return Failure{Kind: KindConflict, Message: se.Error(), Err: err}
	}
	if errors.Is(err, access.ErrKeyNotFound) {
		return Failure{Kind: KindNotFound, Message: err.Error(), Err: err}
	}
	if errors.Is(err, overrides.ErrNotFound) {
		return Failure{Kind: KindNotFound, Message: "override not found: no override is set for this namespace and identifier", Err: err}
	}
	if errors.Is(err, penalties.ErrNotFound) {
		return Failure{Kind: KindNotFound, Message: "penalty not found: no block holds this identifier in this namespace", Err: err}
	}
	if msg, ok := exhaustedMessage(err); ok {
		return Failure{Kind: KindResourceExhausted, Message: msg, Err: err}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return Failure{Kind: KindDeadlineExceeded, Message: err.Error(), Err: err}
	case errors.Is(err, context.Canceled):
		return Failure{Kind: KindCanceled, Message: err.Error(), Err: err}
	}
	return Failure{Kind: KindInternal, Err: err}
}

// exhaustedMessage returns what a request refused by a cap is told: which
// cap, the setting that raises it, and how to get under it.
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
	case errors.Is(err, ErrBusy):
		return err.Error(), true
	}
	var ex Exhausted
	if errors.As(err, &ex) && ex.Exhausted() {
		return err.Error(), true
	}
	return "", false
}

// Exhausted is an error of a package Classify does not know (such as a
// key cap) that is KindResourceExhausted, its message for the caller.
type Exhausted interface {
	error
	Exhausted() bool
}

// ErrBusy is the decode budget's refusal (see package transport): too many
// large requests are being read at once. It is KindResourceExhausted on
// every route; the caller may retry.
var ErrBusy = errors.New("server busy: too many large requests are being read at once; retry shortly")

// Package call is what the request path knows of one call as it goes, in
// the call's context: when it began, who makes it (the principal the
// transport authenticated), how it ended (the outcome the latency metric
// labels), and its request id (which the audit log records). Every layer
// reads it; nothing here decides anything.
package call

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/unkeyed/ratelimit/services/access"
)

type stateKey struct{}

// callState is what the request path learns of one call as it goes: who
// makes it and how it ended, for the request's latency metric. One per
// request, put in its context once.
type callState struct {
	principal access.Principal
	start     time.Time
	outcome   atomic.Uint32 // an Outcome
}

// Outcome is how a call ended, as the latency metric labels it.
type Outcome uint32

// The outcomes of a call. A call that decides nothing (an override, a
// key) and succeeds is OutcomePassed.
const (
	OutcomePassed Outcome = iota
	OutcomeDenied
	OutcomeError
)

// String returns the outcome's label: passed, denied or error.
func (o Outcome) String() string {
	switch o {
	case OutcomeDenied:
		return "denied"
	case OutcomeError:
		return "error"
	}
	return "passed"
}

// WithCall returns ctx carrying the state of a call that began at start,
// before it is authenticated: WithPrincipal then fills it in without
// another context.
func WithCall(ctx context.Context, start time.Time) context.Context {
	return context.WithValue(ctx, stateKey{}, &callState{start: start})
}

// CallStart returns when the call of ctx began (see WithCall), or the zero
// time.
func CallStart(ctx context.Context) time.Time {
	if st, ok := ctx.Value(stateKey{}).(*callState); ok {
		return st.start
	}
	return time.Time{}
}

// WithPrincipal returns ctx carrying the principal access.Authenticate
// resolved, for the handlers behind an adapter's authenticating
// middleware.
func WithPrincipal(ctx context.Context, pr access.Principal) context.Context {
	if st, ok := ctx.Value(stateKey{}).(*callState); ok {
		st.principal = pr
		return ctx
	}
	return context.WithValue(ctx, stateKey{}, &callState{principal: pr})
}

// PrincipalOf returns the principal WithPrincipal put in ctx; without one,
// a principal of no workspace that may do nothing.
func PrincipalOf(ctx context.Context) access.Principal {
	if st, ok := ctx.Value(stateKey{}).(*callState); ok {
		return st.principal
	}
	return access.Principal{}
}

// Workspace returns the workspace of the principal in ctx.
func Workspace(ctx context.Context) string { return PrincipalOf(ctx).Workspace }

// SetOutcome records how the call of ctx ended; the latest one stands.
func SetOutcome(ctx context.Context, o Outcome) {
	if st, ok := ctx.Value(stateKey{}).(*callState); ok {
		st.outcome.Store(uint32(o))
	}
}

// OutcomeOf returns the outcome SetOutcome recorded for the call of ctx
// (OutcomePassed if none).
func OutcomeOf(ctx context.Context) Outcome {
	if st, ok := ctx.Value(stateKey{}).(*callState); ok {
		return Outcome(st.outcome.Load())
	}
	return OutcomePassed
}

// Authorize returns an *access.DeniedError unless the principal of the
// call of ctx may do action in namespace.
func Authorize(ctx context.Context, action access.Action, namespace string) error {
	return PrincipalOf(ctx).Authorize(action, namespace)
}

type requestIDKey struct{}

// WithRequestID returns ctx carrying the id of its request, which the audit
// log records with every change the request makes.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the id WithRequestID put in ctx, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/access"
)

// OpenWorkspace is every caller's workspace when no tokens are configured.
const OpenWorkspace = "default"

// MinTokenLength is the shortest bearer token accepted: 16 characters of a
// random token are at least 80 bits even in a small alphabet, beyond
// guessing over the network.
const MinTokenLength = 16

// MaxWorkspaceLength is the width of the stores' workspace_id columns.
const MaxWorkspaceLength = 191

// The ways authentication fails. Adapters word them for their protocol;
// all are KindUnauthenticated. A revoked key is unknown.
var (
	ErrMissingToken = errors.New("missing bearer token: send an Authorization: Bearer <token> header")
	ErrUnknownToken = errors.New("unknown bearer token")
	ErrExpiredToken = errors.New("expired bearer token: the key's expiry has passed")
)

// Principal is who a request acts as: the workspace its key belongs to,
// what the key may do there, and the key's id (what the audit log names as
// the actor; never its secret).
type Principal struct {
	Workspace   string
	Permissions access.Permissions
	KeyID       string
	// ExpiresAt is when the key stops working; zero: never.
	ExpiresAt time.Time
}

// Keys resolves bearer tokens to principals: a [Tokens] map, or the
// keys of every source a process has (package keys).
type Keys interface {
	// Open reports whether no key is configured at all: every caller is
	// then OpenPrincipal.
	Open() bool
	// Principal returns the principal of token, or ErrUnknownToken,
	// ErrExpiredToken or ErrKeysNotLoaded.
	Principal(token string) (Principal, error)
}

// Add adds token with its principal, keeping only its digest, and reports
// whether it was new.
func (t Tokens) Add(token string, pr Principal) bool {
	sum := sha256.Sum256([]byte(token))
	if _, dup := t[sum]; dup {
		return false
	}
	t[sum] = pr
	return true
}

// OpenKeyID is the key id of OpenPrincipal.
const OpenKeyID = "open"

// OpenPrincipal is every caller when no key is configured: OpenWorkspace,
// with every permission, acting as the key id OpenKeyID.
func OpenPrincipal() Principal {
	return Principal{Workspace: OpenWorkspace, Permissions: access.All(), KeyID: OpenKeyID}
}

// Tokens maps the SHA-256 of a bearer token to its principal. Hashing first
// makes the lookup take the same time whatever prefix of a token a caller
// guesses, and keeps no token in memory.
type Tokens map[[sha256.Size]byte]Principal

// Open reports whether t is empty.
func (t Tokens) Open() bool { return len(t) == 0 }

// Principal returns the principal of token, or ErrUnknownToken.
func (t Tokens) Principal(token string) (Principal, error) {
	pr, ok := t[sha256.Sum256([]byte(token))]
	if !ok {
		return Principal{}, ErrUnknownToken
	}
	return pr, nil
}

// TokenKeyID names a token of UNKEY_AUTH_TOKENS in the audit log: "token_"
// and the first 8 bytes of its digest in hex, which tell tokens apart
// without revealing one.
func TokenKeyID(digest [sha256.Size]byte) string {
	return "token_" + hex.EncodeToString(digest[:8])
}

// ParseTokens parses comma-separated token=workspace_id entries, each with
// every permission in its workspace ([access.All]). An entry
// splits at its last "=", since workspace ids never hold one and base64
// tokens may end in "=" padding.
func ParseTokens(s string) (Tokens, error) {
	t := Tokens{}
	if strings.TrimSpace(s) == "" {
		return t, nil
	}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		cut := strings.LastIndexByte(entry, '=')
		if cut <= 0 || cut == len(entry)-1 {
			return nil, fmt.Errorf("entry %d must be token=workspace_id", i+1)
		}
		token, ws := entry[:cut], entry[cut+1:]
		if len(token) < MinTokenLength {
			return nil, fmt.Errorf("entry %d: token must be at least %d characters, got %d", i+1, MinTokenLength, len(token))
		}
		if len(ws) > MaxWorkspaceLength || !Printable(ws) {
			return nil, fmt.Errorf("entry %d: workspace must be 1 to %d printable characters", i+1, MaxWorkspaceLength)
		}
		if !t.Add(token, Principal{Workspace: ws, Permissions: access.All(), KeyID: TokenKeyID(sha256.Sum256([]byte(token)))}) {
			return nil, fmt.Errorf("entry %d repeats a token", i+1)
		}
	}
	return t, nil
}

// Printable reports whether s is non-empty printable ASCII without spaces.
func Printable(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// Authenticate resolves the principal of a request from its authorization
// header (or gRPC metadata entry), "Bearer <token>", the scheme in any case
// (bearer, BEARER), as RFC 9110 has auth schemes. With no key
// configured every caller is in OpenWorkspace with every permission. The
// workspace is never taken from a request body, so one workspace can never
// read or spend another's counters. It fails with ErrMissingToken or an
// error of [Keys.Principal].
func (p *Pipeline) Authenticate(authorization string) (Principal, error) {
	if p.keys.Open() {
		return OpenPrincipal(), nil
	}
	token, ok := bearerToken(authorization)
	if !ok {
		return Principal{}, ErrMissingToken
	}
	return p.keys.Principal(token)
}

// bearerToken returns the token of an authorization header of the Bearer
// scheme: the scheme matched without regard to case and the spaces after
// it skipped (RFC 9110, section 11.4; RFC 6750, section 2.1), and reports
// whether there is one.
func bearerToken(authorization string) (string, bool) {
	const scheme = "Bearer "
	if len(authorization) < len(scheme) || !strings.EqualFold(authorization[:len(scheme)], scheme) {
		return "", false
	}
	token := strings.TrimLeft(authorization[len(scheme):], " ")
	return token, token != ""
}

type stateKey struct{}

// callState is what the request path learns of one call as it goes: who
// makes it and how it ended, for the request's latency metric. One per
// request, put in its context once.
type callState struct {
	principal Principal
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

// WithPrincipal returns ctx carrying the principal Authenticate resolved,
// for the handlers behind an adapter's authenticating middleware.
func WithPrincipal(ctx context.Context, pr Principal) context.Context {
	if st, ok := ctx.Value(stateKey{}).(*callState); ok {
		st.principal = pr
		return ctx
	}
	return context.WithValue(ctx, stateKey{}, &callState{principal: pr})
}

// PrincipalOf returns the principal WithPrincipal put in ctx; without one,
// a principal of no workspace that may do nothing.
func PrincipalOf(ctx context.Context) Principal {
	if st, ok := ctx.Value(stateKey{}).(*callState); ok {
		return st.principal
	}
	return Principal{}
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

// DeniedError is a request whose key lacks a permission it needs. Nothing
// was changed or counted.
type DeniedError struct {
	// Permission is the one lacking, e.g. "ratelimit.api.set_override".
	Permission string
	// Reason, if set, says why instead.
	Reason string
}

func (e *DeniedError) Error() string {
	if e.Reason != "" {
		return "permission denied: " + e.Reason
	}
	return "permission denied: this key lacks " + e.Permission
}

// Authorize returns a *DeniedError unless the principal in ctx may do
// action in namespace.
func Authorize(ctx context.Context, action access.Action, namespace string) error {
	if PrincipalOf(ctx).Permissions.Allows(action, namespace) {
		return nil
	}
	return &DeniedError{Permission: access.Name(action, namespace)}
}

// authorizeAll is Authorize for every call of a batch, before any is
// decided: a batch needs the permission of every namespace it names.
func authorizeAll(ctx context.Context, calls []Call) error {
	perms := PrincipalOf(ctx).Permissions
	for i := range calls {
		if ns := calls[i].Request.Namespace; !perms.Allows(access.Limit, ns) {
			return &DeniedError{Permission: access.Name(access.Limit, ns)}
		}
	}
	return nil
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

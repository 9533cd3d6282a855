package access

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"
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
// all are unauthenticated. A revoked key is unknown.
var (
	ErrMissingToken = errors.New("missing bearer token: send an Authorization: Bearer <token> header")
	ErrUnknownToken = errors.New("unknown bearer token")
	ErrExpiredToken = errors.New("expired bearer token: the key's expiry has passed")
)

// ErrKeysNotLoaded answers every request of a process whose keys live in
// MySQL and that has not read them since it started: it cannot tell a
// key from a guess yet, and an open door is not the answer.
var ErrKeysNotLoaded = errors.New("keys not loaded yet: this process has not reached the key store since it started; try again")

// ErrKeyNotFound is a key id that names no key of the caller's workspace
// (or a revoked one, where only a live key will do).
var ErrKeyNotFound = errors.New("key not found: this workspace has no live key with this id")

// Principal is who a request acts as: the workspace its key belongs to,
// what the key may do there, and the key's id (what the audit log names as
// the actor; never its secret).
type Principal struct {
	Workspace   string
	Permissions Permissions
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
	sum := TokenDigest(token)
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
	return Principal{Workspace: OpenWorkspace, Permissions: All(), KeyID: OpenKeyID}
}

// Tokens maps the SHA-256 of a bearer token to its principal. Hashing first
// makes the lookup take the same time whatever prefix of a token a caller
// guesses, and keeps no token in memory.
type Tokens map[[sha256.Size]byte]Principal

// Open reports whether t is empty.
func (t Tokens) Open() bool { return len(t) == 0 }

// Principal returns the principal of token, or ErrUnknownToken.
func (t Tokens) Principal(token string) (Principal, error) {
	pr, ok := t[TokenDigest(token)]
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
// every permission in its workspace ([All]). An entry
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
		if !t.Add(token, Principal{Workspace: ws, Permissions: All(), KeyID: TokenKeyID(TokenDigest(token))}) {
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

// Authenticate resolves the principal of a request by keys from its
// authorization header (or gRPC metadata entry), "Bearer <token>", the
// scheme in any case (bearer, BEARER), as RFC 9110 has auth schemes. With
// no key configured every caller is in OpenWorkspace with every
// permission. The workspace is never taken from a request body, so one
// workspace can never read or spend another's counters. It fails with
// ErrMissingToken or an error of [Keys.Principal].
func Authenticate(keys Keys, authorization string) (Principal, error) {
	if keys.Open() {
		return OpenPrincipal(), nil
	}
	token, ok := bearerToken(authorization)
	if !ok {
		return Principal{}, ErrMissingToken
	}
	return keys.Principal(token)
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

// Authorize returns a *DeniedError unless pr may do action in namespace.
func (pr Principal) Authorize(action Action, namespace string) error {
	if pr.Permissions.Allows(action, namespace) {
		return nil
	}
	return &DeniedError{Permission: Name(action, namespace)}
}

// TokenDigest returns the SHA-256 of a bearer token without copying it:
// Sum256 only reads its input, and a copy of a token longer than 32 bytes
// would cost every request an allocation.
func TokenDigest(token string) [sha256.Size]byte {
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(token), len(token)))
}

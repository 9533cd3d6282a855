// Package keys is who may call the API: keys, each a random secret of which
// only the SHA-256 digest is ever kept, belonging to one workspace, with
// permissions (package access), an optional expiry, and revocable.
//
// Keys come from three sources, which a [Ring] holds side by side: the
// tokens of UNKEY_AUTH_TOKENS (every permission), a keys file re-read when
// it changes ([File]: a Kubernetes Secret mounted as a file), and MySQL's
// ratelimit_keys table, polled ([Table]) and managed through a [Store].
package keys

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/keys/store"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Key is a key as a store keeps it: never its secret (see store.Key).
type Key = store.Key

// Digest is the SHA-256 of a key's secret: all that is kept of it.
type Digest = store.Digest

// DigestOf returns the digest of secret (see access.TokenDigest: what a
// request's token is looked up by).
func DigestOf(secret string) Digest { return Digest(access.TokenDigest(secret)) }

// SecretPrefix starts every secret this package generates, so that a
// secret-scanning tool can recognise one that leaked.
const SecretPrefix = "unkey_rl_"

// Generate returns a new secret, SecretPrefix and 256 random bits, and its
// digest.
func Generate() (secret string, digest Digest) {
	var b [32]byte
	rand.Read(b[:])
	secret = SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, DigestOf(secret)
}

// NewID returns a new key id: "key_" and 96 random bits.
func NewID() string {
	var b [12]byte
	rand.Read(b[:])
	return "key_" + hex.EncodeToString(b[:])
}

// Limits on what a key holds: bounds on what every process keeps in memory.
const (
	MaxNameLength = 255
	MaxIDLength   = 64
)

// Validate checks what a caller gives a new or changed key: a name, the
// permissions (valid names, at most access.MaxPermissions), and an expiry
// that is zero or after now.
func Validate(name string, permissions []string, expiresAt, now time.Time) error {
	if err := ratelimit.CheckName("name", name, MaxNameLength); err != nil {
		return err
	}
	if err := ValidatePermissions(permissions); err != nil {
		return err
	}
	if !expiresAt.IsZero() && !expiresAt.After(now) {
		return &invalid.Error{Field: "expires_at", Rule: "must be in the future"}
	}
	return nil
}

// ValidatePermissions checks a key's permission names.
func ValidatePermissions(permissions []string) error {
	if len(permissions) == 0 {
		return &invalid.Error{Field: "permissions", Rule: "must name at least one permission"}
	}
	if _, err := access.Parse(permissions); err != nil {
		return &invalid.Error{Field: "permissions", Rule: err.Error()}
	}
	size := 0
	for _, p := range permissions {
		size += len(p) + 1
	}
	if size > MaxPermissionBytes {
		return &invalid.Error{Field: "permissions",
			Rule: fmt.Sprintf("must be at most %d bytes written out, got %d", MaxPermissionBytes, size)}
	}
	return nil
}

// MaxPermissionBytes bounds a key's permissions written out (names and a
// separator each): what the store's column holds, and a bound on what one
// key costs every process.
const MaxPermissionBytes = 8192

// ErrNotFound is a key that does not exist in the caller's workspace, or
// a revoked one where only a live key will do (see store.ErrNotFound).
var ErrNotFound = store.ErrNotFound

package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"

	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// digestPrefix begins the identifiers the limiter counts under a digest.
const digestPrefix = "sha256:"

// CounterIdentifier returns the identifier the limiter counts a valid
// identifier id under, the same on every route: id itself; or, for one
// longer than ratelimit.MaxNameLength characters (the v2 routes take up to
// 512) and for one that begins with "sha256:", "sha256:" and the hex
// SHA-256 of id, which fits every store. Only digests begin with "sha256:"
// and no digest is of itself, so no identifier a caller can send shares a
// counter with a different one, unless their SHA-256 collide: sending the
// digest of a long identifier counts under the digest of that digest.
// Overrides match the identifier as sent, on every route.
func CounterIdentifier(id string) string {
	if !strings.HasPrefix(id, digestPrefix) && utf8.RuneCountInString(id) <= ratelimit.MaxNameLength {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return digestPrefix + hex.EncodeToString(sum[:])
}

// isDigest reports whether id is a digest CounterIdentifier makes:
// "sha256:" and 64 lowercase hex digits.
func isDigest(id string) bool {
	hexed, ok := strings.CutPrefix(id, digestPrefix)
	if !ok || len(hexed) != 2*sha256.Size {
		return false
	}
	for _, c := range []byte(hexed) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

package keys

import (
	"fmt"
	"maps"
	"time"

	"github.com/unkeyed/ratelimit/services/access"
)

// Set is an immutable snapshot of the keys of one source, by digest: what
// a request's token is looked up in. It is safe for concurrent use.
type Set struct {
	byDigest map[Digest]entry
	// rows counts every key the source holds, revoked ones included: a
	// source that ever held a key closes the API (see Ring.Open).
	rows int
}

// entry is a live key in memory.
type entry struct {
	principal access.Principal
	expiresAt time.Time // zero: never
}

// NewSet returns the set of keys, without the revoked ones. A key whose
// permissions do not parse (a row written by a newer version, or edited by
// hand) is left out and reported in the errors; the others are in the set.
func NewSet(keys []Key) (*Set, []error) {
	return (&Set{}).with(keys, len(keys))
}

// with returns a copy of s with changed, keys that changed since s was
// made, in force: each replaces the key of its digest (a revoked one
// leaves it out), and only it is parsed, so that a change of one key costs
// a copy of the map, not a parse of every key's permissions. added counts
// the keys among changed that s's source did not hold before.
func (s *Set) with(changed []Key, added int) (*Set, []error) {
	next := &Set{byDigest: maps.Clone(s.byDigest), rows: s.rows + added}
	if next.byDigest == nil { // the empty set NewSet starts from
		next.byDigest = make(map[Digest]entry, len(changed))
	}
	var errs []error
	for _, k := range changed {
		delete(next.byDigest, k.Digest)
		if !k.RevokedAt.IsZero() {
			continue
		}
		perms, err := access.Parse(k.Permissions)
		if err != nil {
			errs = append(errs, fmt.Errorf("key %s: %w", k.ID, err))
			continue
		}
		next.byDigest[k.Digest] = entry{
			principal: access.Principal{Workspace: k.Workspace, Permissions: perms, KeyID: k.ID, ExpiresAt: k.ExpiresAt},
			expiresAt: k.ExpiresAt,
		}
	}
	return next, errs
}

// Len returns the number of live keys in s (expired ones included: expiry
// is checked per request).
func (s *Set) Len() int { return len(s.byDigest) }

// lookup returns the principal of digest at now.
func (s *Set) lookup(d Digest, now time.Time) (access.Principal, error) {
	e, ok := s.byDigest[d]
	switch {
	case !ok:
		return access.Principal{}, access.ErrUnknownToken
	case !e.expiresAt.IsZero() && !now.Before(e.expiresAt):
		return access.Principal{}, access.ErrExpiredToken
	}
	return e.principal, nil
}

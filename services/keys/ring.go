package keys

import (
	"sync/atomic"
	"time"

	"github.com/unkeyed/ratelimit/services/access"
)

// Ring is every key a process knows, from all its sources: the tokens of
// UNKEY_AUTH_TOKENS, a keys file, and the keys table. It implements
// [access.Keys]. The file's and the table's sets are swapped in whole,
// so a lookup never sees half a reload. It is safe for concurrent use.
type Ring struct {
	static access.Tokens
	file   atomic.Pointer[Set] // nil: no keys file
	table  atomic.Pointer[Set] // nil: no table, or not loaded yet
	// hasTable: the process has a keys table, loaded or not (set by
	// NewTable, before the ring is in use). Until the table is loaded, a
	// token no other source knows is answered access.ErrKeysNotLoaded,
	// and the API is not open.
	hasTable bool
	now      func() time.Time
}

// RingOption configures a Ring.
type RingOption func(*Ring)

// WithTokens adds the tokens of UNKEY_AUTH_TOKENS.
func WithTokens(t access.Tokens) RingOption { return func(r *Ring) { r.static = t } }

// WithClock sets the clock expiry is checked against (time.Now).
func WithClock(now func() time.Time) RingOption { return func(r *Ring) { r.now = now } }

// NewRing returns a ring of the given tokens; NewFile and NewTable add
// their sources to it.
func NewRing(opts ...RingOption) *Ring {
	r := &Ring{now: time.Now}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Open reports whether no key is configured anywhere, so that every caller
// is access.OpenPrincipal: no tokens, no keys file, and a keys table
// (if any) that was read and has never held a key. A table not read yet
// is not open: the process cannot tell whether keys exist. A revoked key
// is still a row, so revoking every key does not open the API.
func (r *Ring) Open() bool {
	if len(r.static) > 0 || r.file.Load() != nil {
		return false
	}
	if !r.hasTable {
		return true
	}
	t := r.table.Load()
	return t != nil && t.rows == 0
}

// Principal returns the principal of token by its digest, looked up in the
// tokens, the keys file and the keys table in turn. An expired key answers
// access.ErrExpiredToken; a token nobody knows access.ErrUnknownToken,
// or access.ErrKeysNotLoaded while the table that might know it has not
// been read yet.
func (r *Ring) Principal(token string) (access.Principal, error) {
	d := DigestOf(token)
	if pr, ok := r.static[d]; ok {
		return pr, nil
	}
	now := r.now()
	for _, s := range [...]*Set{r.file.Load(), r.table.Load()} {
		if s == nil {
			continue
		}
		if pr, err := s.lookup(d, now); err != access.ErrUnknownToken {
			return pr, err
		}
	}
	if r.hasTable && r.table.Load() == nil {
		return access.Principal{}, access.ErrKeysNotLoaded
	}
	return access.Principal{}, access.ErrUnknownToken
}

// setFile puts a keys file's set in force.
func (r *Ring) setFile(s *Set) { r.file.Store(s) }

// setTable puts the keys table's set in force.
func (r *Ring) setTable(s *Set) { r.table.Store(s) }

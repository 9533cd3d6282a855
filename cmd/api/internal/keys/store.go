package keys

import (
	"context"
	"errors"
)

// Store keeps keys where every process of the fleet reads them: MySQL's
// ratelimit_keys ([MySQL]), or memory ([Memory]) in tests. A key's secret
// never reaches a store, only its digest.
type Store interface {
	// Create stores k, a new key with a unique id and digest, and returns
	// it as stored (its times by the store's clock).
	Create(ctx context.Context, k Key) (Key, error)
	// Get returns a key of workspace, revoked or not, or ErrNotFound.
	Get(ctx context.Context, workspace, id string) (Key, error)
	// List returns up to limit keys of workspace whose id sorts after the
	// given one, in id order, revoked ones included.
	List(ctx context.Context, workspace, after string, limit int) ([]Key, error)
	// Count counts the keys of workspace: all of them, and those not
	// revoked.
	Count(ctx context.Context, workspace string) (total, live int64, err error)
	// SetPermissions replaces the permissions of a live key and returns
	// it as stored, or ErrNotFound.
	SetPermissions(ctx context.Context, workspace, id string, permissions []string) (Key, error)
	// Revoke revokes a live key and returns it as stored, or ErrNotFound.
	Revoke(ctx context.Context, workspace, id string) (Key, error)
	// Summary sums up every key: it changes whenever any key does, so a
	// poll reads keys (Changes, or All) only then.
	Summary(ctx context.Context) (Summary, error)
	// All returns every key, revoked ones included.
	All(ctx context.Context) ([]Key, error)
	// Changes returns every key, revoked ones included, whose revision is
	// at least since.
	Changes(ctx context.Context, since int64) ([]Key, error)
}

// Summary sums up a store's keys: equal summaries, equal keys.
type Summary struct {
	Rows      int64
	Revisions int64
}

// ErrDuplicate is a key whose id or digest the store holds already.
var ErrDuplicate = errors.New("key exists already")

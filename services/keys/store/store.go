// Package store is the contract between package keys and the stores that
// keep its keys: [Store], the [Key] it keeps (never a secret, only its
// [Digest]) and the [Summary] a poll compares. Package storetest holds the
// suite every store runs and a fault wrapper; memstore and mysqlstore
// implement it.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/unkeyed/ratelimit/services/access"
)

// Store keeps keys where every process of the fleet reads them: MySQL's
// ratelimit_keys (package mysqlstore), or memory (package memstore) in
// tests and tools. A key's secret
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

// ErrNotFound is a key that does not exist in the caller's workspace (or
// a revoked one, where only a live key will do): access.ErrKeyNotFound,
// which every protocol answers as not found.
var ErrNotFound = access.ErrKeyNotFound

// ErrDuplicate is a key whose id or digest the store holds already.
var ErrDuplicate = errors.New("key exists already")

// Digest is the SHA-256 of a key's secret: all that is kept of it.
type Digest [sha256.Size]byte

// String returns the digest as the keys file writes it: "sha256:" and hex.
func (d Digest) String() string { return "sha256:" + hex.EncodeToString(d[:]) }

// Key is a key as it is stored: never its secret.
type Key struct {
	ID        string
	Workspace string
	Name      string
	Digest    Digest
	// Permissions are the key's permission names (see package access).
	Permissions []string
	// ExpiresAt is when the key stops working; zero: never.
	ExpiresAt time.Time
	// RevokedAt is when the key was revoked; zero: it is not.
	RevokedAt time.Time
	// CreatedAt and UpdatedAt are by the store's clock.
	CreatedAt, UpdatedAt time.Time
	// Revision grows with every change of the key, by the store's clock:
	// a poll keeps the state with the larger one.
	Revision int64
}

// Package mysqlstore keeps penalty boxes in MySQL's ratelimit_penalties
// table, where every process of every region reads them (see
// [store.Penalties]).
package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/services/penalties/store"
)

// Store is a [store.Penalties] on MySQL. Its methods are safe for
// concurrent use.
type Store struct {
	db *sql.DB
	q  *db.Queries
}

// New returns a store on sqlDB. It does not take ownership: closing sqlDB
// is the caller's job.
func New(sqlDB *sql.DB) *Store { return &Store{db: sqlDB, q: db.New(sqlDB)} }

// Merge merges b into its key's row: in one transaction, the row made if
// there is none, locked, and replaced by b if b is the later state (see
// store.Merge). Its expiry only grows.
func (m *Store) Merge(ctx context.Context, b store.Block) error {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("merge penalty: %w", err)
	}
	defer tx.Rollback() // after a commit, a no-op
	q := m.q.WithTx(tx)
	k := b.Key
	if err := q.PenaltyEnsure(ctx, db.PenaltyEnsureParams{WorkspaceID: k.Workspace, Namespace: k.Namespace, Identifier: k.Identifier}); err != nil {
		return fmt.Errorf("merge penalty: make its row: %w", err)
	}
	r, err := q.PenaltyLock(ctx, db.PenaltyLockParams{WorkspaceID: k.Workspace, Namespace: k.Namespace, Identifier: k.Identifier})
	if err != nil {
		return fmt.Errorf("merge penalty: lock its row: %w", err)
	}
	old := store.Block{Key: k, Start: int64(r.StartedAt), Until: int64(r.UntilAt), Cleared: int64(r.ClearedAt)}
	expires := max(int64(r.ExpiresAt), b.Expires(), b.Cleared)
	merged := store.Merge(old, b)
	if merged == old && expires == int64(r.ExpiresAt) {
		return nil // nothing newer: a replay, or a write read late
	}
	if err := q.PenaltyWrite(ctx, db.PenaltyWriteParams{
		StartedAt: uint64(max(merged.Start, 0)), UntilAt: uint64(max(merged.Until, 0)), ClearedAt: uint64(max(merged.Cleared, 0)),
		ExpiresAt: uint64(max(expires, 0)), WorkspaceID: k.Workspace, Namespace: k.Namespace, Identifier: k.Identifier,
	}); err != nil {
		return fmt.Errorf("merge penalty: write: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("merge penalty: commit: %w", err)
	}
	return nil
}

// Get returns the box of k.
func (m *Store) Get(ctx context.Context, k store.Key) (store.Block, error) {
	r, err := m.q.PenaltyGet(ctx, db.PenaltyGetParams{WorkspaceID: k.Workspace, Namespace: k.Namespace, Identifier: k.Identifier})
	if errors.Is(err, sql.ErrNoRows) {
		return store.Block{}, store.ErrNotFound
	}
	if err != nil {
		return store.Block{}, fmt.Errorf("get penalty: %w", err)
	}
	return fromRow(db.PenaltyChangesRow(r)), nil
}

// List returns a page of a namespace's boxes whose block has not ended.
func (m *Store) List(ctx context.Context, workspace, namespace, after string, now int64, limit int) ([]store.Block, error) {
	rows, err := m.q.PenaltyList(ctx, db.PenaltyListParams{WorkspaceID: workspace, Namespace: namespace, After: after,
		Now: uint64(max(now, 0)), Limit: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list penalties: %w", err)
	}
	out := make([]store.Block, len(rows))
	for i, r := range rows {
		out[i] = fromRow(db.PenaltyChangesRow(r))
	}
	return out, nil
}

// Changes returns up to limit rows written at since or later that matter
// at now, the latest first, and the database's clock read before them.
func (m *Store) Changes(ctx context.Context, since, now int64, limit int) ([]store.Block, int64, error) {
	clock, err := m.q.PenaltyClock(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("read the database's clock: %w", err)
	}
	rows, err := m.q.PenaltyChanges(ctx, db.PenaltyChangesParams{Since: uint64(max(since, 0)), Now: uint64(max(now, 0)),
		Limit: int32(min(max(limit, 1), math.MaxInt32))})
	if err != nil {
		return nil, 0, fmt.Errorf("read penalty changes: %w", err)
	}
	out := make([]store.Block, len(rows))
	for i, r := range rows {
		out[i] = fromRow(r)
	}
	return out, clock, nil
}

func fromRow(r db.PenaltyChangesRow) store.Block {
	return store.Block{
		Key:   store.Key{Workspace: r.WorkspaceID, Namespace: r.Namespace, Identifier: r.Identifier},
		Start: int64(r.StartedAt), Until: int64(r.UntilAt), Cleared: int64(r.ClearedAt),
	}
}

// Package mysqlstore keeps penalty boxes in MySQL's ratelimit_penalties
// table, where every process of every region reads them (see
// [store.Penalties]).
package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/services/penalties/store"
)

// Store is a [store.Penalties] on MySQL. Its methods are safe for
// concurrent use.
type Store struct {
	q *db.Queries
}

// New returns a store on sqlDB. It does not take ownership: closing sqlDB
// is the caller's job.
func New(sqlDB *sql.DB) *Store { return &Store{q: db.New(sqlDB)} }

// Merge merges b into its key's row, in one statement.
func (m *Store) Merge(ctx context.Context, b store.Block) error {
	if err := m.q.PenaltyMerge(ctx, db.PenaltyMergeParams{
		WorkspaceID: b.Workspace, Namespace: b.Namespace, Identifier: b.Identifier,
		StartedAt: uint64(max(b.Start, 0)), UntilAt: uint64(max(b.Until, 0)), ClearedAt: uint64(max(b.Cleared, 0)),
		ExpiresAt: uint64(max(b.Expires(), b.Cleared, 0)),
	}); err != nil {
		return fmt.Errorf("merge penalty: %w", err)
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

// Changes returns the rows written at since or later that matter at now,
// and the database's clock read before them.
func (m *Store) Changes(ctx context.Context, since, now int64) ([]store.Block, int64, error) {
	clock, err := m.q.PenaltyClock(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("read the database's clock: %w", err)
	}
	rows, err := m.q.PenaltyChanges(ctx, db.PenaltyChangesParams{Since: uint64(max(since, 0)), Now: uint64(max(now, 0))})
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

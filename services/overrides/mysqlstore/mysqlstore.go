// Package mysqlstore keeps overrides on MySQL or MariaDB, in the
// ratelimit_overrides table (see store.Overrides).
package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/services/overrides/store"
)

// Store is a [store.Overrides] on the ratelimit_overrides table. The database's
// clock stamps every change (revision in unix µs), so the processes' clocks
// play no part in ordering them.
type Store struct {
	q *db.Queries
}

// New returns a store on sqlDB. It does not take ownership: closing sqlDB
// is the caller's job.
func New(sqlDB *sql.DB) *Store { return &Store{q: db.New(sqlDB)} }

// Set upserts o and reads the row back, for the id it kept and the
// revision the database gave the change.
func (m *Store) Set(ctx context.Context, o store.Override) (store.Change, error) {
	if err := m.q.OverrideUpsert(ctx, db.OverrideUpsertParams{
		ID: o.ID, WorkspaceID: o.Workspace, Namespace: o.Namespace, Identifier: o.Identifier,
		LimitValue: uint64(o.Limit), DurationMs: uint64(o.Duration.Milliseconds()), Burst: uint64(o.Burst), Shadow: o.Shadow,
	}); err != nil {
		return store.Change{}, fmt.Errorf("upsert override: %w", err)
	}
	return m.row(ctx, o.Workspace, o.Namespace, o.Identifier)
}

// row returns the row of an identifier or pattern, live or deleted.
func (m *Store) row(ctx context.Context, workspace, namespace, identifier string) (store.Change, error) {
	r, err := m.q.OverrideRow(ctx, db.OverrideRowParams{WorkspaceID: workspace, Namespace: namespace, Identifier: identifier})
	if err != nil {
		return store.Change{}, fmt.Errorf("read back override: %w", err)
	}
	return fromRow(db.OverrideChangesRow(r)), nil
}

// Get returns the live override of an identifier or pattern.
func (m *Store) Get(ctx context.Context, workspace, namespace, identifier string) (store.Override, error) {
	r, err := m.q.OverrideGet(ctx, db.OverrideGetParams{WorkspaceID: workspace, Namespace: namespace, Identifier: identifier})
	if errors.Is(err, sql.ErrNoRows) {
		return store.Override{}, store.ErrNotFound
	}
	if err != nil {
		return store.Override{}, fmt.Errorf("get override: %w", err)
	}
	return fromRow(db.OverrideChangesRow(r)).Override, nil
}

// List returns a page of a namespace's live overrides.
func (m *Store) List(ctx context.Context, workspace, namespace, after string, limit int) ([]store.Override, error) {
	rows, err := m.q.OverrideList(ctx, db.OverrideListParams{WorkspaceID: workspace, Namespace: namespace, After: after, Limit: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list overrides: %w", err)
	}
	out := make([]store.Override, len(rows))
	for i, r := range rows {
		out[i] = fromRow(db.OverrideChangesRow(r)).Override
	}
	return out, nil
}

// Delete marks the live override deleted and reads the row back.
func (m *Store) Delete(ctx context.Context, workspace, namespace, identifier string) (store.Change, error) {
	n, err := m.q.OverrideDelete(ctx, db.OverrideDeleteParams{WorkspaceID: workspace, Namespace: namespace, Identifier: identifier})
	if err != nil {
		return store.Change{}, fmt.Errorf("delete override: %w", err)
	}
	if n == 0 {
		return store.Change{}, store.ErrNotFound
	}
	return m.row(ctx, workspace, namespace, identifier)
}

// Revision returns the database's clock in unix µs.
func (m *Store) Revision(ctx context.Context) (int64, error) {
	now, err := m.q.OverrideRevisionNow(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the database's clock: %w", err)
	}
	return now, nil
}

// Changes returns the overrides set or deleted at revision since or later.
func (m *Store) Changes(ctx context.Context, since int64) ([]store.Change, error) {
	rows, err := m.q.OverrideChanges(ctx, uint64(max(since, 0)))
	if err != nil {
		return nil, fmt.Errorf("read override changes: %w", err)
	}
	out := make([]store.Change, len(rows))
	for i, r := range rows {
		out[i] = fromRow(r)
	}
	return out, nil
}

// Page returns up to limit live overrides after the row pk after, in pk
// order.
func (m *Store) Page(ctx context.Context, after int64, limit int) ([]store.Change, int64, error) {
	rows, err := m.q.OverrideLoadPage(ctx, db.OverrideLoadPageParams{After: uint64(max(after, 0)), Limit: int32(limit)})
	if err != nil {
		return nil, after, fmt.Errorf("load overrides: %w", err)
	}
	out := make([]store.Change, len(rows))
	last := after
	for i, r := range rows {
		out[i] = fromRow(db.OverrideChangesRow{ID: r.ID, WorkspaceID: r.WorkspaceID, Namespace: r.Namespace,
			Identifier: r.Identifier, LimitValue: r.LimitValue, DurationMs: r.DurationMs, Burst: r.Burst, Shadow: r.Shadow, UpdatedAt: r.UpdatedAt,
			DeletedAt: r.DeletedAt, Revision: r.Revision})
		last = int64(r.Pk)
	}
	return out, last, nil
}

func fromRow(r db.OverrideChangesRow) store.Change {
	return store.Change{
		Override: store.Override{
			ID: r.ID, Workspace: r.WorkspaceID, Namespace: r.Namespace, Identifier: r.Identifier,
			Limit: int64(r.LimitValue), Duration: time.Duration(r.DurationMs) * time.Millisecond, Burst: int64(r.Burst),
			Shadow: r.Shadow, UpdatedAt: int64(r.UpdatedAt),
		},
		Deleted:  r.DeletedAt > 0,
		Revision: int64(r.Revision),
	}
}

package overrides

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/db"
)

// MySQLStore is a [Store] on the ratelimit_overrides table.
type MySQLStore struct {
	q *db.Queries
}

// NewMySQLStore returns a store on sqlDB. It does not take ownership:
// closing sqlDB is the caller's job.
func NewMySQLStore(sqlDB *sql.DB) *MySQLStore { return &MySQLStore{q: db.New(sqlDB)} }

// Set upserts o and reads it back, to return the id it kept.
func (m *MySQLStore) Set(ctx context.Context, o Override) (Override, error) {
	if err := m.q.OverrideUpsert(ctx, db.OverrideUpsertParams{
		ID: o.ID, WorkspaceID: o.Workspace, Namespace: o.Namespace, Identifier: o.Identifier,
		LimitValue: uint64(o.Limit), DurationMs: uint64(o.Duration.Milliseconds()), UpdatedAt: uint64(o.UpdatedAt),
	}); err != nil {
		return Override{}, fmt.Errorf("upsert override: %w", err)
	}
	return m.Get(ctx, o.Workspace, o.Namespace, o.Identifier)
}

// Get returns the live override of an identifier or pattern.
func (m *MySQLStore) Get(ctx context.Context, workspace, namespace, identifier string) (Override, error) {
	r, err := m.q.OverrideGet(ctx, db.OverrideGetParams{WorkspaceID: workspace, Namespace: namespace, Identifier: identifier})
	if errors.Is(err, sql.ErrNoRows) {
		return Override{}, ErrNotFound
	}
	if err != nil {
		return Override{}, fmt.Errorf("get override: %w", err)
	}
	return fromRow(db.OverrideChangesRow(r)).Override, nil
}

// List returns a page of a namespace's live overrides.
func (m *MySQLStore) List(ctx context.Context, workspace, namespace, after string, limit int) ([]Override, error) {
	rows, err := m.q.OverrideList(ctx, db.OverrideListParams{WorkspaceID: workspace, Namespace: namespace, After: after, Limit: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list overrides: %w", err)
	}
	out := make([]Override, len(rows))
	for i, r := range rows {
		out[i] = fromRow(db.OverrideChangesRow(r)).Override
	}
	return out, nil
}

// Delete marks the live override deleted.
func (m *MySQLStore) Delete(ctx context.Context, workspace, namespace, identifier string, now int64) error {
	n, err := m.q.OverrideDelete(ctx, db.OverrideDeleteParams{Now: uint64(now), WorkspaceID: workspace, Namespace: namespace, Identifier: identifier})
	if err != nil {
		return fmt.Errorf("delete override: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Changes returns the overrides set or deleted at or after since.
func (m *MySQLStore) Changes(ctx context.Context, since int64) ([]Change, error) {
	rows, err := m.q.OverrideChanges(ctx, uint64(max(since, 0)))
	if err != nil {
		return nil, fmt.Errorf("read override changes: %w", err)
	}
	out := make([]Change, len(rows))
	for i, r := range rows {
		out[i] = fromRow(r)
	}
	return out, nil
}

func fromRow(r db.OverrideChangesRow) Change {
	return Change{
		Override: Override{
			ID: r.ID, Workspace: r.WorkspaceID, Namespace: r.Namespace, Identifier: r.Identifier,
			Limit: int64(r.LimitValue), Duration: time.Duration(r.DurationMs) * time.Millisecond, UpdatedAt: int64(r.UpdatedAt),
		},
		Deleted: r.DeletedAt > 0,
	}
}

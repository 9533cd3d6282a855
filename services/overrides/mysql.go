package overrides

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/db"
)

// MySQLStore is a [Store] on the ratelimit_overrides table. The database's
// clock stamps every change (revision in unix µs), so the processes' clocks
// play no part in ordering them.
type MySQLStore struct {
	q *db.Queries
}

// NewMySQLStore returns a store on sqlDB. It does not take ownership:
// closing sqlDB is the caller's job.
func NewMySQLStore(sqlDB *sql.DB) *MySQLStore { return &MySQLStore{q: db.New(sqlDB)} }

// Set upserts o and reads the row back, for the id it kept and the
// revision the database gave the change.
func (m *MySQLStore) Set(ctx context.Context, o Override) (Change, error) {
	if err := m.q.OverrideUpsert(ctx, db.OverrideUpsertParams{
		ID: o.ID, WorkspaceID: o.Workspace, Namespace: o.Namespace, Identifier: o.Identifier,
		LimitValue: uint64(o.Limit), DurationMs: uint64(o.Duration.Milliseconds()),
	}); err != nil {
		return Change{}, fmt.Errorf("upsert override: %w", err)
	}
	return m.row(ctx, o.Workspace, o.Namespace, o.Identifier)
}

// row returns the row of an identifier or pattern, live or deleted.
func (m *MySQLStore) row(ctx context.Context, workspace, namespace, identifier string) (Change, error) {
	r, err := m.q.OverrideRow(ctx, db.OverrideRowParams{WorkspaceID: workspace, Namespace: namespace, Identifier: identifier})
	if err != nil {
		return Change{}, fmt.Errorf("read back override: %w", err)
	}
	return fromRow(db.OverrideChangesRow(r)), nil
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

// Delete marks the live override deleted and reads the row back.
func (m *MySQLStore) Delete(ctx context.Context, workspace, namespace, identifier string) (Change, error) {
	n, err := m.q.OverrideDelete(ctx, db.OverrideDeleteParams{WorkspaceID: workspace, Namespace: namespace, Identifier: identifier})
	if err != nil {
		return Change{}, fmt.Errorf("delete override: %w", err)
	}
	if n == 0 {
		return Change{}, ErrNotFound
	}
	return m.row(ctx, workspace, namespace, identifier)
}

// Revision returns the database's clock in unix µs.
func (m *MySQLStore) Revision(ctx context.Context) (int64, error) {
	now, err := m.q.OverrideRevisionNow(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the database's clock: %w", err)
	}
	return now, nil
}

// Changes returns the overrides set or deleted at revision since or later.
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

// Page returns up to limit live overrides after the row pk after, in pk
// order.
func (m *MySQLStore) Page(ctx context.Context, after int64, limit int) ([]Change, int64, error) {
	rows, err := m.q.OverrideLoadPage(ctx, db.OverrideLoadPageParams{After: uint64(max(after, 0)), Limit: int32(limit)})
	if err != nil {
		return nil, after, fmt.Errorf("load overrides: %w", err)
	}
	out := make([]Change, len(rows))
	last := after
	for i, r := range rows {
		out[i] = fromRow(db.OverrideChangesRow{ID: r.ID, WorkspaceID: r.WorkspaceID, Namespace: r.Namespace,
			Identifier: r.Identifier, LimitValue: r.LimitValue, DurationMs: r.DurationMs, UpdatedAt: r.UpdatedAt,
			DeletedAt: r.DeletedAt, Revision: r.Revision})
		last = int64(r.Pk)
	}
	return out, last, nil
}

func fromRow(r db.OverrideChangesRow) Change {
	return Change{
		Override: Override{
			ID: r.ID, Workspace: r.WorkspaceID, Namespace: r.Namespace, Identifier: r.Identifier,
			Limit: int64(r.LimitValue), Duration: time.Duration(r.DurationMs) * time.Millisecond, UpdatedAt: int64(r.UpdatedAt),
		},
		Deleted:  r.DeletedAt > 0,
		Revision: int64(r.Revision),
	}
}

// Package mysqlstore keeps keys in Store's ratelimit_keys, which every
// process of every region polls.
package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/services/keys/store"
)

// Store is a Store in Store's ratelimit_keys.
type Store struct{ q *db.Queries }

// New returns the store of the database sqlDB.
func New(sqlDB *sql.DB) *Store { return &Store{q: db.New(sqlDB)} }

// Create implements store.Store.
func (m *Store) Create(ctx context.Context, k store.Key) (store.Key, error) {
	var expires uint64
	if !k.ExpiresAt.IsZero() {
		expires = uint64(k.ExpiresAt.UnixMilli())
	}
	err := m.q.KeyInsert(ctx, db.KeyInsertParams{ID: k.ID, WorkspaceID: k.Workspace, Name: k.Name, Digest: k.Digest[:],
		Permissions: strings.Join(k.Permissions, " "), ExpiresAt: expires})
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY
		return store.Key{}, store.ErrDuplicate
	}
	if err != nil {
		return store.Key{}, fmt.Errorf("create key %s: %w", k.ID, err)
	}
	return m.Get(ctx, k.Workspace, k.ID)
}

// Get implements store.Store.
func (m *Store) Get(ctx context.Context, workspace, id string) (store.Key, error) {
	r, err := m.q.KeyGet(ctx, db.KeyGetParams{WorkspaceID: workspace, ID: id})
	if errors.Is(err, sql.ErrNoRows) {
		return store.Key{}, store.ErrNotFound
	}
	if err != nil {
		return store.Key{}, fmt.Errorf("get key %s: %w", id, err)
	}
	return fromRow(db.KeyAllRow(r)), nil
}

// List implements store.Store.
func (m *Store) List(ctx context.Context, workspace, after string, limit int) ([]store.Key, error) {
	rows, err := m.q.KeyList(ctx, db.KeyListParams{WorkspaceID: workspace, After: after, Limit: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	out := make([]store.Key, len(rows))
	for i, r := range rows {
		out[i] = fromRow(db.KeyAllRow(r))
	}
	return out, nil
}

// Count implements store.Store.
func (m *Store) Count(ctx context.Context, workspace string) (total, live int64, err error) {
	r, err := m.q.KeyCount(ctx, workspace)
	if err != nil {
		return 0, 0, fmt.Errorf("count keys: %w", err)
	}
	return r.Total, r.Live, nil
}

// SetPermissions implements store.Store.
func (m *Store) SetPermissions(ctx context.Context, workspace, id string, permissions []string) (store.Key, error) {
	n, err := m.q.KeyUpdatePermissions(ctx, db.KeyUpdatePermissionsParams{Permissions: strings.Join(permissions, " "),
		WorkspaceID: workspace, ID: id})
	return m.changed(ctx, workspace, id, n, err)
}

// Revoke implements store.Store.
func (m *Store) Revoke(ctx context.Context, workspace, id string) (store.Key, error) {
	n, err := m.q.KeyRevoke(ctx, db.KeyRevokeParams{WorkspaceID: workspace, ID: id})
	return m.changed(ctx, workspace, id, n, err)
}

// changed reads back the key an UPDATE of n rows changed.
func (m *Store) changed(ctx context.Context, workspace, id string, n int64, err error) (store.Key, error) {
	if err != nil {
		return store.Key{}, fmt.Errorf("change key %s: %w", id, err)
	}
	if n == 0 {
		return store.Key{}, store.ErrNotFound
	}
	return m.Get(ctx, workspace, id)
}

// Summary implements store.Store.
func (m *Store) Summary(ctx context.Context) (store.Summary, error) {
	r, err := m.q.KeySummary(ctx)
	if err != nil {
		return store.Summary{}, fmt.Errorf("sum up keys: %w", err)
	}
	return store.Summary{Rows: r.RowCount, Revisions: r.Revisions}, nil
}

// All implements store.Store.
func (m *Store) All(ctx context.Context) ([]store.Key, error) {
	rows, err := m.q.KeyAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	out := make([]store.Key, len(rows))
	for i, r := range rows {
		out[i] = fromRow(r)
	}
	return out, nil
}

// Changes implements store.Store.
func (m *Store) Changes(ctx context.Context, since int64) ([]store.Key, error) {
	rows, err := m.q.KeyChanges(ctx, uint64(max(since, 0)))
	if err != nil {
		return nil, fmt.Errorf("read changed keys: %w", err)
	}
	out := make([]store.Key, len(rows))
	for i, r := range rows {
		out[i] = fromRow(db.KeyAllRow(r))
	}
	return out, nil
}

// fromRow converts a row; times are unix ms, 0 for none.
func fromRow(r db.KeyAllRow) store.Key {
	k := store.Key{ID: r.ID, Workspace: r.WorkspaceID, Name: r.Name, Permissions: strings.Fields(r.Permissions),
		ExpiresAt: msTime(r.ExpiresAt), RevokedAt: msTime(r.RevokedAt), CreatedAt: msTime(r.CreatedAt), UpdatedAt: msTime(r.UpdatedAt),
		Revision: int64(r.Revision)}
	copy(k.Digest[:], r.Digest)
	return k
}

func msTime(ms uint64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms)).UTC()
}

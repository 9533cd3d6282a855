package keys

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/db"
)

// MySQL is a Store in MySQL's ratelimit_keys.
type MySQL struct{ q *db.Queries }

// NewMySQL returns the Store of the database sqlDB.
func NewMySQL(sqlDB *sql.DB) *MySQL { return &MySQL{q: db.New(sqlDB)} }

// Create implements Store.
func (m *MySQL) Create(ctx context.Context, k Key) (Key, error) {
	var expires uint64
	if !k.ExpiresAt.IsZero() {
		expires = uint64(k.ExpiresAt.UnixMilli())
	}
	err := m.q.KeyInsert(ctx, db.KeyInsertParams{ID: k.ID, WorkspaceID: k.Workspace, Name: k.Name, Digest: k.Digest[:],
		Permissions: strings.Join(k.Permissions, " "), ExpiresAt: expires})
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY
		return Key{}, ErrDuplicate
	}
	if err != nil {
		return Key{}, fmt.Errorf("create key %s: %w", k.ID, err)
	}
	return m.Get(ctx, k.Workspace, k.ID)
}

// Get implements Store.
func (m *MySQL) Get(ctx context.Context, workspace, id string) (Key, error) {
	r, err := m.q.KeyGet(ctx, db.KeyGetParams{WorkspaceID: workspace, ID: id})
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, ErrNotFound
	}
	if err != nil {
		return Key{}, fmt.Errorf("get key %s: %w", id, err)
	}
	return fromRow(db.KeyAllRow(r)), nil
}

// List implements Store.
func (m *MySQL) List(ctx context.Context, workspace, after string, limit int) ([]Key, error) {
	rows, err := m.q.KeyList(ctx, db.KeyListParams{WorkspaceID: workspace, After: after, Limit: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	out := make([]Key, len(rows))
	for i, r := range rows {
		out[i] = fromRow(db.KeyAllRow(r))
	}
	return out, nil
}

// Count implements Store.
func (m *MySQL) Count(ctx context.Context, workspace string) (total, live int64, err error) {
	r, err := m.q.KeyCount(ctx, workspace)
	if err != nil {
		return 0, 0, fmt.Errorf("count keys: %w", err)
	}
	return r.Total, r.Live, nil
}

// SetPermissions implements Store.
func (m *MySQL) SetPermissions(ctx context.Context, workspace, id string, permissions []string) (Key, error) {
	n, err := m.q.KeyUpdatePermissions(ctx, db.KeyUpdatePermissionsParams{Permissions: strings.Join(permissions, " "),
		WorkspaceID: workspace, ID: id})
	return m.changed(ctx, workspace, id, n, err)
}

// Revoke implements Store.
func (m *MySQL) Revoke(ctx context.Context, workspace, id string) (Key, error) {
	n, err := m.q.KeyRevoke(ctx, db.KeyRevokeParams{WorkspaceID: workspace, ID: id})
	return m.changed(ctx, workspace, id, n, err)
}

// changed reads back the key an UPDATE of n rows changed.
func (m *MySQL) changed(ctx context.Context, workspace, id string, n int64, err error) (Key, error) {
	if err != nil {
		return Key{}, fmt.Errorf("change key %s: %w", id, err)
	}
	if n == 0 {
		return Key{}, ErrNotFound
	}
	return m.Get(ctx, workspace, id)
}

// Summary implements Store.
func (m *MySQL) Summary(ctx context.Context) (Summary, error) {
	r, err := m.q.KeySummary(ctx)
	if err != nil {
		return Summary{}, fmt.Errorf("sum up keys: %w", err)
	}
	return Summary{Rows: r.RowCount, Revisions: r.Revisions}, nil
}

// All implements Store.
func (m *MySQL) All(ctx context.Context) ([]Key, error) {
	rows, err := m.q.KeyAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	out := make([]Key, len(rows))
	for i, r := range rows {
		out[i] = fromRow(r)
	}
	return out, nil
}

// Changes implements Store.
func (m *MySQL) Changes(ctx context.Context, since int64) ([]Key, error) {
	rows, err := m.q.KeyChanges(ctx, uint64(max(since, 0)))
	if err != nil {
		return nil, fmt.Errorf("read changed keys: %w", err)
	}
	out := make([]Key, len(rows))
	for i, r := range rows {
		out[i] = fromRow(db.KeyAllRow(r))
	}
	return out, nil
}

// fromRow converts a row; times are unix ms, 0 for none.
func fromRow(r db.KeyAllRow) Key {
	k := Key{ID: r.ID, Workspace: r.WorkspaceID, Name: r.Name, Permissions: strings.Fields(r.Permissions),
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

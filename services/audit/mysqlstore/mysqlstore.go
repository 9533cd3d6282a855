// Package mysqlstore keeps the audit log in MySQL's ratelimit_audit_log,
// which every process of every region shares and the worker's cleanup
// purges after audit.Retention.
package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/services/audit/store"
)

// Store is a store.Log in MySQL. It is safe for concurrent use.
type Store struct{ q *db.Queries }

// New returns the store of the database sqlDB.
func New(sqlDB *sql.DB) *Store { return &Store{q: db.New(sqlDB)} }

// Record implements store.Log. The database stamps the time; the ID is not read
// back (entries are listed, never looked up).
func (m *Store) Record(ctx context.Context, e store.Entry) error {
	err := m.q.AuditInsert(ctx, db.AuditInsertParams{WorkspaceID: e.Workspace, ActorKeyID: e.Actor, Action: e.Action,
		Target: e.Target, BeforeValue: e.Before, AfterValue: e.After, RequestID: e.RequestID})
	if err != nil {
		return fmt.Errorf("record %s of %s: %w", e.Action, e.Target, err)
	}
	return nil
}

// List implements store.Log.
func (m *Store) List(ctx context.Context, workspace string, f store.Filter, before int64, limit int) ([]store.Entry, error) {
	p := db.AuditListParams{WorkspaceID: workspace, BeforePk: math.MaxInt64, Action: f.Action, Target: f.Target,
		ActorKeyID: f.Actor, UntilMs: math.MaxInt64, Limit: int32(limit)}
	if before > 0 {
		p.BeforePk = uint64(before)
	}
	if !f.Since.IsZero() {
		p.SinceMs = uint64(max(f.Since.UnixMilli(), 0))
	}
	if !f.Until.IsZero() {
		p.UntilMs = uint64(max(f.Until.UnixMilli(), 0))
	}
	rows, err := m.q.AuditList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list audit log: %w", err)
	}
	out := make([]store.Entry, len(rows))
	for i, r := range rows {
		out[i] = store.Entry{ID: int64(r.Pk), Workspace: r.WorkspaceID, Actor: r.ActorKeyID, Action: r.Action, Target: r.Target,
			Before: r.BeforeValue, After: r.AfterValue, RequestID: r.RequestID, Time: time.UnixMilli(int64(r.CreatedAt)).UTC()}
	}
	return out, nil
}

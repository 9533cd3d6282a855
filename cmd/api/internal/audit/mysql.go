package audit

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/unkeyed/ratelimit/db"
)

// MySQL is a Log in MySQL's ratelimit_audit_log, which the worker's
// cleanup purges after the retention.
type MySQL struct{ q *db.Queries }

// NewMySQL returns the Log of the database db.
func NewMySQL(sqlDB *sql.DB) *MySQL { return &MySQL{q: db.New(sqlDB)} }

// Record implements Log. The database stamps the time; the ID is not read
// back (entries are listed, never looked up).
func (m *MySQL) Record(ctx context.Context, e Entry) error {
	err := m.q.AuditInsert(ctx, db.AuditInsertParams{WorkspaceID: e.Workspace, ActorKeyID: e.Actor, Action: e.Action,
		Target: e.Target, BeforeValue: e.Before, AfterValue: e.After, RequestID: e.RequestID})
	if err != nil {
		return fmt.Errorf("record %s of %s: %w", e.Action, e.Target, err)
	}
	return nil
}

// List implements Log.
func (m *MySQL) List(ctx context.Context, workspace string, f Filter, before int64, limit int) ([]Entry, error) {
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
	out := make([]Entry, len(rows))
	for i, r := range rows {
		out[i] = Entry{ID: int64(r.Pk), Workspace: r.WorkspaceID, Actor: r.ActorKeyID, Action: r.Action, Target: r.Target,
			Before: r.BeforeValue, After: r.AfterValue, RequestID: r.RequestID, Time: time.UnixMilli(int64(r.CreatedAt)).UTC()}
	}
	return out, nil
}

// Package mysqlstore keeps the analytics and the roll call in the tables every
// process of every region shares.
package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/analytics/store"
)

// Store is a store.Store and a store.Fleet on the analytics tables every region
// shares. A query reads each span of time from the finest granularity that
// holds it: minutes for the last analytics.MinuteSpan, hours back to analytics.HourSpan (rolled
// up by the worker), days before.
type Store struct {
	db  *sql.DB
	q   *db.Queries
	now func() time.Time
}

// New returns a store on sqlDB, reading the spans by the clock now.
func New(sqlDB *sql.DB, now func() time.Time) *Store {
	return &Store{db: sqlDB, q: db.New(sqlDB), now: now}
}

// Add implements store.Store: each bucket's and identifier's counts are added to
// the row, in chunks of db.AnalyticsBulkMaxRows sorted by key, all in one
// transaction with the batch's id: a flush that fails (a store that is
// slow past the caller's deadline, a statement refused) applies nothing,
// and one whose commit's answer was lost finds its id when it is sent
// again, and adds nothing. Each add also deletes up to 100 batch ids over
// an hour old, so that the table holds about an hour of flushes.
func (m *Store) Add(ctx context.Context, batch string, buckets []store.Bucket, top []store.Entry) error {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add analytics: %w", err)
	}
	defer tx.Rollback() // after a commit, a no-op
	q := m.q.WithTx(tx)
	now := m.now().UnixMilli()
	first, err := q.AnalyticsBatchClaim(ctx, db.AnalyticsBatchClaimParams{ID: batch, CreatedAt: uint64(now)})
	if err != nil {
		return fmt.Errorf("add analytics: record batch %s: %w", batch, err)
	}
	if first == 0 {
		return nil // added before: its answer was lost
	}
	if err := q.AnalyticsBatchesPurge(ctx, db.AnalyticsBatchesPurgeParams{Cutoff: uint64(now - time.Hour.Milliseconds()), Limit: 100}); err != nil {
		return fmt.Errorf("add analytics: purge old batch ids: %w", err)
	}
	if err := addRows(ctx, q, buckets, top); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add analytics: commit: %w", err)
	}
	return nil
}

// addRows adds buckets and top with q, in chunks sorted by key.
func addRows(ctx context.Context, q *db.Queries, buckets []store.Bucket, top []store.Entry) error {
	rows := make([]db.RatelimitAnalytic, len(buckets))
	for i, b := range buckets {
		rows[i] = db.RatelimitAnalytic{WorkspaceID: b.Workspace, Namespace: b.Namespace, Granularity: uint8(store.Minute),
			Bucket: b.Start.UnixMilli(), Passed: uint64(max(b.Passed, 0)), Denied: uint64(max(b.Denied, 0)),
			ShadowDenied: uint64(max(b.ShadowDenied, 0))}
	}
	slices.SortFunc(rows, func(a, b db.RatelimitAnalytic) int {
		return compareBuckets(a.WorkspaceID, a.Namespace, a.Bucket, b.WorkspaceID, b.Namespace, b.Bucket)
	})
	for start := 0; start < len(rows); start += db.AnalyticsBulkMaxRows {
		if err := q.AnalyticsAddBuckets(ctx, rows[start:min(start+db.AnalyticsBulkMaxRows, len(rows))]); err != nil {
			return fmt.Errorf("add analytics buckets: %w", err)
		}
	}
	entries := make([]db.RatelimitAnalyticsTop, len(top))
	for i, e := range top {
		entries[i] = db.RatelimitAnalyticsTop{WorkspaceID: e.Workspace, Namespace: e.Namespace, Granularity: uint8(store.Minute),
			Bucket: e.Start.UnixMilli(), Identifier: e.Identifier, Passed: uint64(max(e.Passed, 0)), Denied: uint64(max(e.Denied, 0)),
			ShadowDenied: uint64(max(e.ShadowDenied, 0))}
	}
	slices.SortFunc(entries, func(a, b db.RatelimitAnalyticsTop) int {
		return cmp.Or(compareBuckets(a.WorkspaceID, a.Namespace, a.Bucket, b.WorkspaceID, b.Namespace, b.Bucket),
			cmp.Compare(a.Identifier, b.Identifier))
	})
	for start := 0; start < len(entries); start += db.AnalyticsBulkMaxRows {
		if err := q.AnalyticsAddTop(ctx, entries[start:min(start+db.AnalyticsBulkMaxRows, len(entries))]); err != nil {
			return fmt.Errorf("add analytics identifiers: %w", err)
		}
	}
	return nil
}

// compareBuckets orders the minutes a flush adds as the unique keys do
// (the granularity is the same for all).
func compareBuckets(wsA, nsA string, bucketA int64, wsB, nsB string, bucketB int64) int {
	return cmp.Or(cmp.Compare(wsA, wsB), cmp.Compare(nsA, nsB), cmp.Compare(bucketA, bucketB))
}

// span is a time range read from one granularity.
type span struct {
	g        store.Granularity
	from, to int64 // unix ms
}

// spans splits [from, to) into the spans each granularity holds.
func (m *Store) spans(from, to time.Time) []span {
	now := m.now()
	minuteStart := now.Add(-analytics.MinuteSpan).Truncate(time.Hour).UnixMilli()
	hourStart := now.Add(-analytics.HourSpan).Truncate(24 * time.Hour).UnixMilli()
	f, t := from.UnixMilli(), to.UnixMilli()
	var out []span
	for _, s := range []span{{store.Day, f, min(t, hourStart)}, {store.Hour, max(f, hourStart), min(t, minuteStart)}, {store.Minute, max(f, minuteStart), t}} {
		if s.from < s.to {
			out = append(out, s)
		}
	}
	return out
}

// Series implements store.Store.
func (m *Store) Series(ctx context.Context, workspace, namespace string, g store.Granularity, from, to time.Time) ([]store.Point, error) {
	size := g.Duration().Milliseconds()
	sums := map[int64]*store.Point{}
	for _, s := range m.spans(from, to) {
		rows, err := m.q.AnalyticsSeries(ctx, db.AnalyticsSeriesParams{WorkspaceID: workspace, Namespace: namespace,
			Granularity: uint8(s.g), FromMs: s.from, ToMs: s.to})
		if err != nil {
			return nil, fmt.Errorf("read analytics: %w", err)
		}
		for _, r := range rows {
			store.AddPoint(sums, r.Bucket/size*size, int64(r.Passed), int64(r.Denied), int64(r.ShadowDenied))
		}
	}
	return store.SortedPoints(sums), nil
}

// Top implements store.Store. Each span is read up to four times n identifiers,
// so that one named in several spans adds up.
func (m *Store) Top(ctx context.Context, workspace, namespace string, from, to time.Time, n int) ([]store.Identifier, error) {
	sums := map[string]*store.Identifier{}
	for _, s := range m.spans(from, to) {
		rows, err := m.q.AnalyticsTop(ctx, db.AnalyticsTopParams{WorkspaceID: workspace, Namespace: namespace,
			Granularity: uint8(s.g), FromMs: s.from, ToMs: s.to, Limit: int32(4 * n)})
		if err != nil {
			return nil, fmt.Errorf("read top identifiers: %w", err)
		}
		for _, r := range rows {
			store.AddIdentifier(sums, r.Identifier, r.Passed, r.Denied, r.ShadowDenied)
		}
	}
	return store.Rank(sums, n), nil
}

// Namespaces implements store.Store.
func (m *Store) Namespaces(ctx context.Context, workspace string, from, to time.Time, n int) ([]store.Identifier, error) {
	sums := map[string]*store.Identifier{}
	for _, s := range m.spans(from, to) {
		rows, err := m.q.AnalyticsNamespaces(ctx, db.AnalyticsNamespacesParams{WorkspaceID: workspace,
			Granularity: uint8(s.g), FromMs: s.from, ToMs: s.to, Limit: int32(4 * n)})
		if err != nil {
			return nil, fmt.Errorf("read namespaces: %w", err)
		}
		for _, r := range rows {
			store.AddIdentifier(sums, r.Namespace, r.Passed, r.Denied, r.ShadowDenied)
		}
	}
	return store.Rank(sums, n), nil
}

// Seen implements store.Fleet.
func (m *Store) Seen(ctx context.Context, p store.Process) error {
	nodes, err := json.Marshal(p.Breakers)
	if err != nil {
		return err
	}
	var lastSync uint64
	if !p.LastSync.IsZero() {
		lastSync = uint64(p.LastSync.UnixMilli())
	}
	if err := m.q.ProcessSeen(ctx, db.ProcessSeenParams{ProcessID: p.ID, Region: p.Region, LastSyncAt: lastSync,
		RedisNodes: string(nodes), FlushIntervalMs: uint64(max(p.FlushInterval.Milliseconds(), 0))}); err != nil {
		return fmt.Errorf("record the process's roll call: %w", err)
	}
	return nil
}

// Processes implements store.Fleet.
func (m *Store) Processes(ctx context.Context, since time.Duration) ([]store.Process, time.Time, error) {
	cutoff := uint64(max(m.now().Add(-since).UnixMilli(), 0))
	rows, err := m.q.ProcessesSeenSince(ctx, cutoff)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read the processes' roll call: %w", err)
	}
	now := m.now()
	out := make([]store.Process, len(rows))
	for i, r := range rows {
		now = time.UnixMilli(r.NowMs)
		p := store.Process{ID: r.ProcessID, Region: r.Region, SeenAt: time.UnixMilli(int64(r.SeenAt)),
			FlushInterval: time.Duration(r.FlushIntervalMs) * time.Millisecond}
		if r.LastSyncAt > 0 {
			p.LastSync = time.UnixMilli(int64(r.LastSyncAt))
		}
		_ = json.Unmarshal([]byte(r.RedisNodes), &p.Breakers)
		out[i] = p
		// NOW() is the statement's start, and a roll call committed
		// between it and the read is seen, stamped a few ms later: the
		// time now is at least the latest roll call read.
		if p.SeenAt.After(now) {
			now = p.SeenAt
		}
	}
	return out, now, nil
}

// Package mysqlstore is the limiter's global store on MySQL or MariaDB: the
// ratelimit_window_counts table, one grow-only component per region and
// window cell, shared by every region (see store.Global).
package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Store is a [store.Global] on the ratelimit_window_counts table of
// a MySQL-compatible database (MySQL 8, MariaDB 10.6+).
type Store struct {
	db *sql.DB
	// lastFullRows is how many cells the latest full read returned: the
	// yardstick for when reading the changed cells no longer pays.
	lastFullRows atomic.Int64
}

// New returns a store on sqlDB. It does not take ownership: closing sqlDB is
// the caller's job.
func New(sqlDB *sql.DB) *Store {
	return &Store{db: sqlDB}
}

// connectTimeout bounds setting up a connection for a call: dialling,
// authenticating and setting the session's time zone, round trips that a
// slow database may each hold for seconds (three at five seconds each took
// about 15 s). It is apart from the budget of the call's statements (the
// caller's ctx), so that a call that needs a new connection has the same
// time for its statements as one that finds one idle in the pool.
const connectTimeout = 30 * time.Second

// queries returns the queries of one call on a connection of the pool, set
// up within connectTimeout, and the function that gives it back.
func (m *Store) queries(ctx context.Context) (*db.Queries, func(), error) {
	setup, cancel := context.WithTimeout(context.WithoutCancel(ctx), connectTimeout)
	defer cancel()
	conn, err := m.db.Conn(setup)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	return db.New(conn), func() { conn.Close() }, nil
}

// deadlockRetries is how often a chunk is sent again after InnoDB chose it as
// a deadlock victim (or timed out waiting for a lock). Writers sort their rows
// in key order, so deadlocks need writers outside this code; three tries
// ride out a transient one.
const deadlockRetries = 3

// Publish upserts counts in chunks of db.WindowCountsBulkUpsertMaxRows, in
// the order given; callers sort them in unique-key order. The database
// stamps the rows with its own clock.
func (m *Store) Publish(ctx context.Context, region string, counts []store.CellCount) (int, error) {
	q, done, err := m.queries(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	rows := make([]db.WindowCountsUpsertParams, 0, min(len(counts), db.WindowCountsBulkUpsertMaxRows))
	for start := 0; start < len(counts); start += db.WindowCountsBulkUpsertMaxRows {
		chunk := counts[start:min(start+db.WindowCountsBulkUpsertMaxRows, len(counts))]
		rows = rows[:0]
		for _, c := range chunk {
			durMs := c.Key.Duration.Milliseconds()
			// A cell's refunds are the refunded column of its row: each
			// publish raises one column and leaves the other.
			count, refunded := uint64(max(c.Count, 0)), uint64(0)
			if c.Key.Refunds {
				count, refunded = 0, count
			}
			rows = append(rows, db.WindowCountsUpsertParams{
				WorkspaceID: c.Key.Workspace,
				Namespace:   c.Key.Namespace,
				Identifier:  c.Key.Identifier,
				DurationMs:  uint64(durMs),
				Sequence:    c.Key.Sequence,
				Region:      region,
				Count:       count,
				Refunded:    refunded,
				ExpiresAt:   uint64(c.Key.ExpiresAt()),
				WindowLimit: uint64(max(c.Limit, 0)),
			})
		}
		for attempt := 0; attempt < deadlockRetries; attempt++ {
			if err = q.WindowCountsBulkUpsert(ctx, rows); !retryable(err) {
				break
			}
			time.Sleep(time.Duration(attempt+1) * 10 * time.Millisecond)
		}
		if err != nil {
			return start, fmt.Errorf("upsert %d window counts: %w", len(rows), err)
		}
	}
	return len(counts), nil
}

// retryable reports whether err is a deadlock or lock wait timeout, after
// which InnoDB has rolled the statement back and it can be sent again.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// Sync returns the live cells with this region's component and the sum of
// the others': all of them for the zero since, else those with a row
// changed at or after since (the database's clock, which stamped the rows).
// An incremental sync first counts the changed rows (one index range),
// reading the database's clock in the same statement: none ends it there;
// more than a quarter of what the last full read returned (and at least
// minChangedForFull) reads every live cell instead, which is then cheaper
// than collecting the changed ones (a changed cell costs several times what
// a cell of the full read does; docs/BENCHMARKS.md has the figures; rows
// counted overstate cells when several regions wrote one, which only
// switches to the full read a little early).
func (m *Store) Sync(ctx context.Context, region string, now, since time.Time) ([]store.GlobalCount, time.Time, error) {
	q, done, err := m.queries(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer done()
	nowMs := uint64(now.UnixMilli())
	var asOf int64
	if !since.IsZero() {
		sinceMs := uint64(max(since.UnixMilli(), 0))
		changed, err := q.WindowCountsChangedCount(ctx, sinceMs)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("count changed window counts: %w", err)
		}
		asOf = changed.NowMs
		if changed.Changed == 0 {
			return nil, time.UnixMilli(asOf), nil
		}
		if changed.Changed < max(m.lastFullRows.Load()/4, minChangedForFull) {
			rows, err := q.WindowCountsSyncChanged(ctx, db.WindowCountsSyncChangedParams{Region: region, Since: sinceMs, Now: nowMs})
			if err != nil {
				return nil, time.Time{}, fmt.Errorf("sync changed window counts: %w", err)
			}
			out := make([]store.GlobalCount, 0, len(rows))
			for _, r := range rows {
				out = appendGlobalCounts(out, db.WindowCountsSyncRow(r))
			}
			return out, time.UnixMilli(asOf), nil
		}
	} else {
		if asOf, err = q.WindowCountsNow(ctx); err != nil {
			return nil, time.Time{}, fmt.Errorf("read the database's clock: %w", err)
		}
	}
	rows, err := q.WindowCountsSync(ctx, db.WindowCountsSyncParams{Region: region, Now: nowMs})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sync window counts: %w", err)
	}
	m.lastFullRows.Store(int64(len(rows)))
	out := make([]store.GlobalCount, 0, len(rows))
	for _, r := range rows {
		out = appendGlobalCounts(out, r)
	}
	return out, time.UnixMilli(asOf), nil
}

// minChangedForFull is the fewest changed rows for which an incremental
// sync reads everything instead: below it the changed-cells query takes
// milliseconds whatever the table's size.
const minChangedForFull = 1000

// appendGlobalCounts appends what a row of the sync queries holds: the
// cell, and its refunds (store.CellKey.Refunds) when any region gave some
// back.
func appendGlobalCounts(out []store.GlobalCount, r db.WindowCountsSyncRow) []store.GlobalCount {
	key := store.CellKey{
		Workspace:  r.WorkspaceID,
		Namespace:  r.Namespace,
		Identifier: r.Identifier,
		Duration:   time.Duration(r.DurationMs) * time.Millisecond,
		Sequence:   r.Sequence,
	}
	out = append(out, store.GlobalCount{Key: key, Own: r.Own, Others: r.Imported, OthersLimit: r.ImportedLimit})
	if r.OwnRefunded > 0 || r.ImportedRefunded > 0 {
		key.Refunds = true
		out = append(out, store.GlobalCount{Key: key, Own: r.OwnRefunded, Others: r.ImportedRefunded, OthersLimit: r.ImportedLimit})
	}
	return out
}

package db

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

func openTestDB(t *testing.T) *sql.DB {
	t.Helper()
	m := testserver.StartMariaDB(t)
	db, err := sql.Open("mysql", m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for range 2 { // idempotent
		if err := Migrate(context.Background(), db); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func row(ws, ns, id string, seq int64, region string, count uint64) WindowCountsUpsertParams {
	return WindowCountsUpsertParams{WorkspaceID: ws, Namespace: ns, Identifier: id, DurationMs: 60_000,
		Sequence: seq, Region: region, Count: count, ExpiresAt: uint64(seq+2) * 60_000}
}

func TestWindowCounts(t *testing.T) {
	db := openTestDB(t)
	q := New(db)
	ctx := context.Background()
	long := strings.Repeat("🙂", 255) // 255 characters, 1020 bytes
	rows := []WindowCountsUpsertParams{
		row("ws", "ns", "a", 10, "us", 5),
		row("ws", "ns", "a", 10, "eu", 7),
		row("ws", "ns", "a", 10, "ap", 1),
		row("ws", "ns", "B", 10, "eu", 3),
		row("ws", "ns", "b", 10, "eu", 4), // case-sensitive: not the same row as "B"
		row(strings.Repeat("w", 191), long, long, 10, strings.Repeat("r", 48), 9),
	}
	if err := q.WindowCountsBulkUpsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	// An older, smaller publish never lowers a component; a larger one raises it.
	if err := q.WindowCountsUpsert(ctx, row("ws", "ns", "a", 10, "eu", 2)); err != nil {
		t.Fatal(err)
	}
	if err := q.WindowCountsBulkUpsert(ctx, []WindowCountsUpsertParams{row("ws", "ns", "a", 10, "us", 6)}); err != nil {
		t.Fatal(err)
	}
	got, err := q.WindowCountsSync(ctx, WindowCountsSyncParams{Region: "eu", Now: 600_000})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]WindowCountsSyncRow{}
	for _, r := range got {
		byID[r.Identifier] = r
	}
	if a := byID["a"]; a.Own != 7 || a.Imported != 7 {
		t.Fatalf("a: own %d imported %d, want 7 and 7 (us 6 + ap 1)", a.Own, a.Imported)
	}
	if byID["B"].Own != 3 || byID["b"].Own != 4 {
		t.Fatalf("B and b share a row: %+v %+v", byID["B"], byID["b"])
	}
	if l := byID[long]; l.Namespace != long || l.WorkspaceID != strings.Repeat("w", 191) || l.Imported != 9 {
		t.Fatalf("maximum-length names did not round-trip: %+v", l)
	}
	// Expired rows are not synced, and deleted in bounded batches.
	if err := q.WindowCountsBulkUpsert(ctx, []WindowCountsUpsertParams{row("ws", "ns", "old", 1, "us", 1), row("ws", "ns", "old", 2, "us", 1), row("ws", "ns", "old", 3, "us", 1)}); err != nil {
		t.Fatal(err)
	}
	got, _ = q.WindowCountsSync(ctx, WindowCountsSyncParams{Region: "eu", Now: 600_000})
	for _, r := range got {
		if r.Identifier == "old" {
			t.Fatalf("an expired row was synced: %+v", r)
		}
	}
	for _, want := range []int64{2, 1, 0} {
		b, err := q.WindowCountsExpiredBatch(ctx, WindowCountsExpiredBatchParams{Cutoff: 600_000, Limit: 2})
		if err != nil || b.RowsInBatch != want {
			t.Fatalf("batch counted %+v, %v; want %d rows", b, err, want)
		}
		for run := range 2 { // a delete repeated after a crash deletes nothing more
			n, err := q.WindowCountsDeleteBatch(ctx, WindowCountsDeleteBatchParams{LastPk: uint64(b.LastPk), Cutoff: 600_000})
			if wantN := map[int]int64{0: want, 1: 0}[run]; err != nil || n != wantN {
				t.Fatalf("delete %d of a batch of %d deleted %d, %v; want %d", run+1, want, n, err, wantN)
			}
		}
	}
}

func TestBulkUpsertAtTheChunkLimit(t *testing.T) {
	db := openTestDB(t)
	q := New(db)
	rows := make([]WindowCountsUpsertParams, WindowCountsBulkUpsertMaxRows)
	for i := range rows {
		rows[i] = row("ws", "ns", "id"+strings.Repeat("x", i%7)+string(rune('a'+i%26)), int64(i), "us", uint64(i))
	}
	if err := q.WindowCountsBulkUpsert(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	var count int
	if err := db.QueryRow("SELECT COUNT(*) FROM ratelimit_window_counts").Scan(&count); err != nil || count != len(rows) {
		t.Fatalf("%d rows stored (%v), want %d", count, err, len(rows))
	}
}

func TestBlocklistQueries(t *testing.T) {
	db := openTestDB(t)
	q := New(db)
	ctx := context.Background()
	stats, err := q.BlocklistStats(ctx)
	if err != nil || stats.RowCount != 0 || stats.LatestExpiresAt != 0 {
		t.Fatalf("empty table stats = %+v, %v", stats, err)
	}
	for i, exp := range []uint64{100, 200, 300} {
		if err := q.BulkInsertBlocklist(ctx, BulkInsertBlocklistParams{WorkspaceID: "ws", Namespace: "ns", Identifier: "id",
			DurationMs: 100, Sequence: int64(i), ExpiresAt: exp, CreatedAt: uint64(10 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	stats, _ = q.BlocklistStats(ctx)
	if stats.RowCount != 3 || stats.LatestExpiresAt != 300 || stats.LatestCreatedAt != 12 {
		t.Fatalf("stats = %+v", stats)
	}
	active, err := q.BlocklistListActive(ctx, 150)
	if err != nil || len(active) != 2 {
		t.Fatalf("active at 150: %v, %v; want 2 rows", active, err)
	}
	b, err := q.BlocklistExpiredBatch(ctx, BlocklistExpiredBatchParams{Cutoff: 250, Limit: 10})
	if err != nil || b.RowsInBatch != 2 {
		t.Fatalf("batch %+v, %v; want 2 rows", b, err)
	}
	n, err := q.BlocklistDeleteBatch(ctx, BlocklistDeleteBatchParams{LastPk: uint64(b.LastPk), Cutoff: 250})
	if err != nil || n != 2 {
		t.Fatalf("deleted %d, %v; want 2", n, err)
	}
}

// TestTrailingSpacesAreDistinct: identifiers, namespaces and workspaces that
// differ only in trailing spaces are different rows (utf8mb4_bin alone is
// PAD SPACE and would merge them).
func TestTrailingSpacesAreDistinct(t *testing.T) {
	db := openTestDB(t)
	q := New(db)
	ctx := context.Background()
	rows := []WindowCountsUpsertParams{
		row("ws", "ns", "alice", 10, "us", 5),
		row("ws", "ns", "alice ", 10, "us", 1),
		row("ws", "ns ", "alice", 10, "us", 2),
		row("ws ", "ns", "alice", 10, "us", 3),
	}
	if err := q.WindowCountsBulkUpsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	got, err := q.WindowCountsSync(ctx, WindowCountsSyncParams{Region: "eu", Now: 600_000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d cells, want 4: %+v", len(got), got)
	}
	for _, r := range got {
		want := map[string]int64{"ws|ns|alice": 5, "ws|ns|alice ": 1, "ws|ns |alice": 2, "ws |ns|alice": 3}[r.WorkspaceID+"|"+r.Namespace+"|"+r.Identifier]
		if r.Imported != want {
			t.Fatalf("%q/%q/%q: %d, want %d", r.WorkspaceID, r.Namespace, r.Identifier, r.Imported, want)
		}
	}
}

// TestMigrateUpgradesAnOldTable: a table as the first version created it
// (PAD SPACE collation, no window_limit, no updated_at index) is brought up
// to the schema with its rows kept, and a second Migrate changes nothing.
// createOldTables creates the window counts (with a row), overrides and
// processes (with a row) tables as an earlier version did: without
// window_limit, updated_at_idx, revisions or flush intervals, in a PAD
// SPACE collation.
func createOldTables(t *testing.T, db *sql.DB) {
	t.Helper()
	if _, err := db.Exec(`CREATE TABLE ratelimit_window_counts (
		pk bigint unsigned AUTO_INCREMENT NOT NULL, workspace_id varchar(191) NOT NULL, namespace varchar(255) NOT NULL,
		identifier varchar(255) NOT NULL, duration_ms bigint unsigned NOT NULL, sequence bigint NOT NULL,
		region varchar(48) NOT NULL, count bigint unsigned NOT NULL, expires_at bigint unsigned NOT NULL,
		updated_at bigint unsigned NOT NULL, PRIMARY KEY (pk),
		UNIQUE KEY unique_window_region (workspace_id, namespace, identifier, duration_ms, sequence, region),
		KEY expires_at_idx (expires_at), KEY lookup_idx (workspace_id, namespace, identifier, duration_ms, sequence)
	) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO ratelimit_window_counts (workspace_id, namespace, identifier, duration_ms, sequence, region, count, expires_at, updated_at)
		VALUES ('ws', 'ns', 'alice', 60000, 10, 'us', 5, 720000, 1)`); err != nil {
		t.Fatal(err)
	}
	// The overrides table before revisions.
	if _, err := db.Exec(`CREATE TABLE ratelimit_overrides (
		pk bigint unsigned AUTO_INCREMENT NOT NULL, id varchar(64) NOT NULL, workspace_id varchar(191) NOT NULL,
		namespace varchar(255) NOT NULL, identifier varchar(255) NOT NULL, limit_value bigint unsigned NOT NULL,
		duration_ms bigint unsigned NOT NULL, updated_at bigint unsigned NOT NULL, deleted_at bigint unsigned NOT NULL DEFAULT 0,
		PRIMARY KEY (pk), UNIQUE KEY unique_override (workspace_id, namespace, identifier), UNIQUE KEY unique_override_id (id),
		KEY overrides_updated_at_idx (updated_at)
	) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`); err != nil {
		t.Fatal(err)
	}
	// The roll call before flush intervals.
	if _, err := db.Exec(`CREATE TABLE ratelimit_processes (
		process_id varchar(64) NOT NULL, region varchar(48) NOT NULL, seen_at bigint unsigned NOT NULL,
		last_sync_at bigint unsigned NOT NULL, redis_nodes text NOT NULL,
		CONSTRAINT ratelimit_processes_pk PRIMARY KEY (process_id), INDEX processes_seen_at_idx (seen_at)
	) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO ratelimit_processes (process_id, region, seen_at, last_sync_at, redis_nodes)
		VALUES ('old', 'us', 1000, 0, '{}')`); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateConcurrently: eight processes migrating an earlier version's
// tables at once all succeed, and the tables come out upgraded once.
func TestMigrateConcurrently(t *testing.T) {
	m := testserver.StartMariaDB(t)
	db, err := sql.Open("mysql", m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	createOldTables(t, db)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			other, err := sql.Open("mysql", m.DSN) // a process of its own
			if err != nil {
				errs <- err
				return
			}
			defer other.Close()
			errs <- Migrate(context.Background(), other)
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("a concurrent Migrate: %v", err)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()
		AND TABLE_NAME = 'ratelimit_window_counts' AND COLUMN_NAME = 'window_limit'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("window_limit columns after the migrations: %d (%v)", n, err)
	}
}

func TestMigrateUpgradesAnOldTable(t *testing.T) {
	m := testserver.StartMariaDB(t)
	db, err := sql.Open("mysql", m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	createOldTables(t, db)
	// Under PAD SPACE, 'alice ' is the same row.
	if _, err := db.Exec(`INSERT INTO ratelimit_window_counts (workspace_id, namespace, identifier, duration_ms, sequence, region, count, expires_at, updated_at)
		VALUES ('ws', 'ns', 'alice ', 60000, 10, 'us', 1, 720000, 1)`); err == nil {
		t.Fatal("the old table took 'alice ' beside 'alice'; the test's premise is wrong")
	}
	schema := func() string {
		var out []string
		rs, err := db.Query(`SELECT COLUMN_NAME, COLUMN_TYPE, COALESCE(COLLATION_NAME, '') FROM information_schema.COLUMNS
			WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'ratelimit_window_counts' ORDER BY ORDINAL_POSITION`)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		for rs.Next() {
			var a, b, c string
			rs.Scan(&a, &b, &c)
			out = append(out, a+" "+b+" "+c)
		}
		var idx int
		db.QueryRow(`SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()
			AND TABLE_NAME = 'ratelimit_window_counts' AND INDEX_NAME = 'updated_at_idx'`).Scan(&idx)
		return strings.Join(out, "; ") + fmt.Sprintf("; updated_at_idx=%d", idx)
	}
	for range 2 {
		if err := Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	after := schema()
	for _, want := range []string{"identifier varchar(255) utf8mb4_nopad_bin", "namespace varchar(255) utf8mb4_nopad_bin",
		"workspace_id varchar(191) utf8mb4_nopad_bin", "region varchar(48) utf8mb4_nopad_bin", "window_limit bigint(20) unsigned",
		"refunded bigint(20) unsigned", "updated_at_idx=1"} {
		if !strings.Contains(after, want) {
			t.Fatalf("schema after Migrate: %s\nwant it to contain %q", after, want)
		}
	}
	if err := Migrate(ctx, db); err != nil || schema() != after {
		t.Fatalf("a third Migrate changed the schema (%v): %s", err, schema())
	}
	var overrideIndexes int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()
		AND TABLE_NAME = 'ratelimit_overrides' AND INDEX_NAME IN ('overrides_revision_idx', 'overrides_deleted_at_idx')`).Scan(&overrideIndexes); err != nil || overrideIndexes != 2 {
		t.Fatalf("the old overrides table has %d of the revision and deleted_at indexes (%v), want 2", overrideIndexes, err)
	}
	if err := New(db).OverrideUpsert(ctx, OverrideUpsertParams{ID: "ovr_1", WorkspaceID: "ws", Namespace: "ns", Identifier: "alice",
		LimitValue: 1, DurationMs: 1000}); err != nil {
		t.Fatalf("an override set on the upgraded table: %v", err)
	}
	q := New(db)
	if err := q.WindowCountsUpsert(ctx, row("ws", "ns", "alice ", 10, "us", 1)); err != nil {
		t.Fatal(err)
	}
	got, err := q.WindowCountsSync(ctx, WindowCountsSyncParams{Region: "eu", Now: 600_000})
	if err != nil || len(got) != 2 {
		t.Fatalf("after the upgrade: %+v, %v; want 'alice' (5, kept) and 'alice ' (1) apart", got, err)
	}
	// The old roll call's row is kept, with no flush interval, beside a
	// process that says its own.
	if err := q.ProcessSeen(ctx, ProcessSeenParams{ProcessID: "new", Region: "us", RedisNodes: "{}", FlushIntervalMs: 10_000}); err != nil {
		t.Fatalf("a roll call on the upgraded table: %v", err)
	}
	procs, err := q.ProcessesSeenSince(ctx, 0)
	if err != nil || len(procs) != 2 || procs[0].ProcessID != "new" || procs[0].FlushIntervalMs != 10_000 ||
		procs[1].ProcessID != "old" || procs[1].FlushIntervalMs != 0 {
		t.Fatalf("the roll call after the upgrade: %+v, %v; want new (10 s) and old (0)", procs, err)
	}
}

// TestSyncChanged reads only the cells of which a row changed since a time,
// with every region's row of those cells in the sums.
func TestSyncChanged(t *testing.T) {
	db := openTestDB(t)
	q := New(db)
	ctx := context.Background()
	old := row("ws", "ns", "quiet", 10, "eu", 4)
	changedOld := row("ws", "ns", "busy", 10, "eu", 6)
	changedNew := row("ws", "ns", "busy", 10, "ap", 2)
	changedNew.WindowLimit = 10
	own := row("ws", "ns", "busy", 10, "us", 3)
	if err := q.WindowCountsBulkUpsert(ctx, []WindowCountsUpsertParams{changedOld, changedNew, old, own}); err != nil {
		t.Fatal(err)
	}
	// The database's clock stamped them all; all but ap's row changed long ago.
	if _, err := db.Exec("UPDATE ratelimit_window_counts SET updated_at = 1000 WHERE region <> 'ap'"); err != nil {
		t.Fatal(err)
	}
	changed, err := q.WindowCountsChangedCount(ctx, 4000)
	if err != nil || changed.Changed != 1 {
		t.Fatalf("rows changed since 4000: %+v, %v; want 1", changed, err)
	}
	if d := time.Now().UnixMilli() - changed.NowMs; d < -1000 || d > 1000 {
		t.Fatalf("the database's clock read %d, %d ms from this process's", changed.NowMs, d)
	}
	got, err := q.WindowCountsSyncChanged(ctx, WindowCountsSyncChangedParams{Region: "us", Since: 4000, Now: 600_000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Identifier != "busy" || got[0].Imported != 8 || got[0].Own != 3 || got[0].ImportedLimit != 10 {
		t.Fatalf("changed since 4000: %+v, want only busy with imported 8 (eu 6 + ap 2), own 3, limit 10", got)
	}
	all, err := q.WindowCountsSyncChanged(ctx, WindowCountsSyncChangedParams{Region: "us", Since: 0, Now: 600_000})
	if err != nil || len(all) != 2 {
		t.Fatalf("changed since 0: %+v, %v; want both cells", all, err)
	}
}

// TestEveryTextColumnIsNoPad: after Migrate, every text column of every
// table compares byte for byte. Before, the analytics, roll call, audit
// log, keys and secrets tables kept PAD SPACE: a key allowed namespace
// "sec" read the analytics of "sec " and ListNamespaces merged the two.
func TestEveryTextColumnIsNoPad(t *testing.T) {
	db := openTestDB(t)
	rows, err := db.Query(`SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND DATA_TYPE IN ('char', 'varchar') ORDER BY TABLE_NAME, COLUMN_NAME`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var table, column, collation string
		if err := rows.Scan(&table, &column, &collation); err != nil {
			t.Fatal(err)
		}
		n++
		if !slices.Contains(noPadCollations, collation) {
			t.Errorf("%s.%s is %s, want a NO PAD collation (%v)", table, column, collation, noPadCollations)
		}
	}
	if n < 20 {
		t.Fatalf("%d text columns, want every table's", n)
	}
	// A column given NO PAD keeps its default: a settlement of an earlier
	// version's writer, which names no workspace, is still taken.
	if _, err := db.Exec(`INSERT INTO ratelimit_reservation_settlements (id, cost, expires_at) VALUES (UNHEX(REPEAT('ab', 16)), 1, 1)`); err != nil {
		t.Fatalf("a settlement without a workspace after Migrate: %v", err)
	}
	// The analytics tell "sec" and "sec " apart.
	if _, err := db.Exec(`INSERT INTO ratelimit_analytics (workspace_id, namespace, granularity, bucket, passed, denied)
		VALUES ('ws', 'sec', 1, 0, 1, 0), ('ws', 'sec ', 1, 0, 5, 0)`); err != nil {
		t.Fatalf("namespaces differing in a trailing space: %v", err)
	}
	var passed int64
	if err := db.QueryRow(`SELECT SUM(passed) FROM ratelimit_analytics WHERE workspace_id = 'ws' AND namespace = 'sec'`).Scan(&passed); err != nil || passed != 1 {
		t.Fatalf("namespace 'sec' reads %d passed (%v), want its own 1", passed, err)
	}
}

package db

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/internal/testserver"
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
		Sequence: seq, Region: region, Count: count, ExpiresAt: uint64(seq+2) * 60_000, UpdatedAt: 1}
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
	n, err := q.WindowCountsDeleteExpired(ctx, WindowCountsDeleteExpiredParams{Cutoff: 600_000, Limit: 2})
	if err != nil || n != 2 {
		t.Fatalf("first batch deleted %d, %v; want 2", n, err)
	}
	n, err = q.WindowCountsDeleteExpired(ctx, WindowCountsDeleteExpiredParams{Cutoff: 600_000, Limit: 2})
	if err != nil || n != 1 {
		t.Fatalf("second batch deleted %d, %v; want 1", n, err)
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
	n, err := q.BlocklistDeleteExpired(ctx, BlocklistDeleteExpiredParams{Cutoff: 250, Limit: 10})
	if err != nil || n != 2 {
		t.Fatalf("deleted %d, %v; want 2", n, err)
	}
}

package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// noPadCollations are the binary utf8mb4 collations without PAD SPACE, in
// order of preference: MariaDB names it utf8mb4_nopad_bin, MySQL 8.0.17+
// utf8mb4_0900_bin (newer MariaDB releases accept that name too, as an
// alias, so MariaDB's own name comes first). Under utf8mb4_bin, the PAD SPACE collation the tables
// are created with, 'alice' and 'alice ' are equal, so two identifiers would
// share a row and spend each other's budget.
var noPadCollations = []string{"utf8mb4_nopad_bin", "utf8mb4_0900_bin"}

// textColumns are the text columns that must compare byte for byte, with
// their definitions: every one a query looks rows up or groups them by.
// Under PAD SPACE a key allowed the namespace "sec" read the analytics of
// "sec " (which it could not ask for directly), and the two were merged
// in one bucket.
var textColumns = map[string][]columnDef{
	"ratelimit_window_counts": {
		{"workspace_id", "varchar(191)"}, {"namespace", "varchar(255)"},
		{"identifier", "varchar(255)"}, {"region", "varchar(48)"},
	},
	"ratelimit_blocklist": {
		{"workspace_id", "varchar(191)"}, {"namespace", "varchar(255)"}, {"identifier", "varchar(255)"},
	},
	"ratelimit_overrides": {
		{"workspace_id", "varchar(191)"}, {"namespace", "varchar(255)"}, {"identifier", "varchar(255)"},
		{"id", "varchar(64)"},
	},
	"ratelimit_analytics": {{"workspace_id", "varchar(191)"}, {"namespace", "varchar(255)"}},
	"ratelimit_analytics_top": {
		{"workspace_id", "varchar(191)"}, {"namespace", "varchar(255)"}, {"identifier", "varchar(255)"},
	},
	"ratelimit_processes":         {{"process_id", "varchar(64)"}, {"region", "varchar(48)"}},
	"ratelimit_analytics_batches": {{"id", "varchar(64)"}},
	"ratelimit_audit_log": {
		{"workspace_id", "varchar(191)"}, {"actor_key_id", "varchar(64)"}, {"action", "varchar(32)"},
		{"target", "varchar(1024)"}, {"request_id", "varchar(64)"},
	},
	"ratelimit_keys":                    {{"id", "varchar(64)"}, {"workspace_id", "varchar(191)"}, {"name", "varchar(255)"}},
	"ratelimit_secrets":                 {{"name", "varchar(64)"}},
	"ratelimit_reservation_settlements": {{"workspace_id", "varchar(191)"}},
	"ratelimit_penalties": {
		{"workspace_id", "varchar(191)"}, {"namespace", "varchar(255)"}, {"identifier", "varchar(255)"},
	},
}

type columnDef struct{ name, typ string }

// columnDefaults are the defaults of textColumns that have one, by
// "table.column": a MODIFY must repeat a column's default or drop it.
var columnDefaults = map[string]string{"ratelimit_reservation_settlements.workspace_id": "DEFAULT ''"}

// upgrade brings tables that an earlier version created up to the schema in
// schema/: CREATE TABLE IF NOT EXISTS leaves an existing table as it is.
// Each step looks at information_schema first and changes only what differs,
// so running it again changes nothing. MySQL 8 has no ADD COLUMN IF NOT
// EXISTS, hence the look first.
func upgrade(ctx context.Context, db execer) error {
	if err := addColumn(ctx, db, "ratelimit_window_counts", "window_limit", "bigint unsigned NOT NULL DEFAULT 0"); err != nil {
		return err
	}
	if err := addIndex(ctx, db, "ratelimit_window_counts", "updated_at_idx", "updated_at"); err != nil {
		return err
	}
	// Refunds of settled reservations: 0 for the rows of an earlier
	// version, which had none.
	if err := addColumn(ctx, db, "ratelimit_window_counts", "refunded", "bigint unsigned NOT NULL DEFAULT 0"); err != nil {
		return err
	}
	// Overrides are ordered by the database's revision, not the writers'
	// clocks, and their tombstones are purged by deleted_at. Rows of an
	// earlier version keep revision 0: processes load them in full at start,
	// and their next change gives them a revision.
	if err := addColumn(ctx, db, "ratelimit_overrides", "revision", "bigint unsigned NOT NULL DEFAULT 0"); err != nil {
		return err
	}
	if err := addIndex(ctx, db, "ratelimit_overrides", "overrides_revision_idx", "revision"); err != nil {
		return err
	}
	if err := addIndex(ctx, db, "ratelimit_overrides", "overrides_deleted_at_idx", "deleted_at"); err != nil {
		return err
	}
	// An override may replace a token bucket's burst: 0, the request's
	// own, in rows of an earlier version.
	if err := addColumn(ctx, db, "ratelimit_overrides", "burst", "bigint unsigned NOT NULL DEFAULT 0"); err != nil {
		return err
	}
	// Settlements name their workspace, counted against its cap: '' in
	// rows of an earlier version, which expire within a day.
	if err := addColumn(ctx, db, "ratelimit_reservation_settlements", "workspace_id", "varchar(191) NOT NULL DEFAULT ''"); err != nil {
		return err
	}
	if err := addIndex(ctx, db, "ratelimit_reservation_settlements", "settlements_workspace_idx", "workspace_id", "expires_at"); err != nil {
		return err
	}
	// The roll call says how often each process reports: 0 for the rows
	// of an earlier version, whose readers assume the default interval.
	if err := addColumn(ctx, db, "ratelimit_processes", "flush_interval_ms", "bigint unsigned NOT NULL DEFAULT 0"); err != nil {
		return err
	}
	// The analytics count shadow denials apart: 0 in the rows of an
	// earlier version, which had none.
	for _, table := range []string{"ratelimit_analytics", "ratelimit_analytics_top"} {
		if err := addColumn(ctx, db, table, "shadow_denied", "bigint unsigned NOT NULL DEFAULT 0"); err != nil {
			return err
		}
	}
	// An override can decide as shadow calls: false in the rows of an
	// earlier version, which could not.
	if err := addColumn(ctx, db, "ratelimit_overrides", "shadow", "boolean NOT NULL DEFAULT FALSE"); err != nil {
		return err
	}
	collation, err := noPadCollation(ctx, db)
	if err != nil {
		return err
	}
	for _, table := range slices.Sorted(maps.Keys(textColumns)) {
		if err := setCollation(ctx, db, table, collation); err != nil {
			return err
		}
	}
	return nil
}

// addColumn adds column to table unless it is there.
func addColumn(ctx context.Context, db execer, table, column, def string) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?`, table, column).Scan(&n); err != nil {
		return fmt.Errorf("look up column %s.%s: %w", table, column, err)
	}
	if n > 0 {
		return nil
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("ALTER TABLE `%s` ADD COLUMN `%s` %s", table, column, def)); err != nil {
		return fmt.Errorf("add column %s.%s: %w", table, column, err)
	}
	return nil
}

// addIndex adds index on columns to table unless an index of that name is
// there.
func addIndex(ctx context.Context, db execer, table, index string, columns ...string) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = ?`, table, index).Scan(&n); err != nil {
		return fmt.Errorf("look up index %s.%s: %w", table, index, err)
	}
	if n > 0 {
		return nil
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("ALTER TABLE `%s` ADD INDEX `%s` (`%s`)", table, index, strings.Join(columns, "`, `"))); err != nil {
		return fmt.Errorf("add index %s.%s: %w", table, index, err)
	}
	return nil
}

// noPadCollation returns the server's NO PAD binary utf8mb4 collation.
func noPadCollation(ctx context.Context, db execer) (string, error) {
	for _, name := range noPadCollations {
		var found string
		err := db.QueryRowContext(ctx, "SELECT COLLATION_NAME FROM information_schema.COLLATIONS WHERE COLLATION_NAME = ?", name).Scan(&found)
		if err == nil {
			return found, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("look up collation %s: %w", name, err)
		}
	}
	return "", fmt.Errorf("the server has none of the collations %s: MySQL 8.0.17+ or MariaDB 10.6+ is required",
		strings.Join(noPadCollations, ", "))
}

// setCollation changes the key columns of table that are not in collation
// to it, in one ALTER TABLE. A table that does not exist (the blocklist after
// its retirement) is skipped.
func setCollation(ctx context.Context, db execer, table, collation string) error {
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, COALESCE(COLLATION_NAME, '') FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, table)
	if err != nil {
		return fmt.Errorf("look up columns of %s: %w", table, err)
	}
	current := map[string]string{}
	for rows.Next() {
		var name, coll string
		if err := rows.Scan(&name, &coll); err != nil {
			rows.Close()
			return fmt.Errorf("look up columns of %s: %w", table, err)
		}
		current[name] = coll
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("look up columns of %s: %w", table, err)
	}
	var modify []string
	for _, c := range textColumns[table] {
		if coll, ok := current[c.name]; ok && coll != collation {
			modify = append(modify, strings.TrimSpace(fmt.Sprintf("MODIFY `%s` %s CHARACTER SET utf8mb4 COLLATE %s NOT NULL %s",
				c.name, c.typ, collation, columnDefaults[table+"."+c.name])))
		}
	}
	if len(modify) == 0 {
		return nil
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("ALTER TABLE `%s` %s", table, strings.Join(modify, ", "))); err != nil {
		return fmt.Errorf("make the key columns of %s compare byte for byte (%s): %w", table, collation, err)
	}
	return nil
}

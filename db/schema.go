package db

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"time"
)

// schema holds the table definitions. Every statement in them is idempotent
// (CREATE TABLE IF NOT EXISTS), so applying them again changes nothing.
//
//go:embed schema/*.sql
var schema embed.FS

// Migrate applies the schema to db, one statement at a time, in file name
// order, then brings tables created by earlier versions up to it (see
// upgrade). It is safe to run any number of times, and from several
// processes at once (every replica of a deployment may run it at start):
// it holds the database's named lock migrateLock meanwhile, so that two
// never both find a column missing and both add it.
func Migrate(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	// GET_LOCK waits at most its timeout in seconds; a ctx that ends
	// sooner cancels the statement.
	timeout := 60
	if deadline, ok := ctx.Deadline(); ok {
		timeout = max(1, int(time.Until(deadline).Seconds()))
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", migrateLock, timeout).Scan(&got); err != nil {
		return fmt.Errorf("migrate: take the lock %s: %w", migrateLock, err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("migrate: another migration held the lock %s for %d s", migrateLock, timeout)
	}
	// The lock is the session's: closing the connection would free it too,
	// but a pooled connection lives on.
	defer conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", migrateLock)
	if err := createTables(ctx, conn); err != nil {
		return err
	}
	return upgrade(ctx, conn)
}

// migrateLock names the database lock Migrate holds.
const migrateLock = "unkey_ratelimit.migrate"

// execer is what the migration needs of a connection.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// createTables applies the CREATE TABLE IF NOT EXISTS statements.
func createTables(ctx context.Context, db execer) error {
	files, err := fs.Glob(schema, "schema/*.sql")
	if err != nil {
		return err
	}
	for _, name := range files {
		raw, err := schema.ReadFile(name)
		if err != nil {
			return err
		}
		for _, stmt := range statements(string(raw)) {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("apply %s: %w", name, err)
			}
		}
	}
	return nil
}

// statements splits a schema file into its statements: comment lines are
// dropped and a statement ends with a semicolon at the end of a line.
func statements(text string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

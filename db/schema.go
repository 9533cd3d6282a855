package db

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"strings"
)

// schema holds the table definitions. Every statement in them is idempotent
// (CREATE TABLE IF NOT EXISTS), so applying them again changes nothing.
//
//go:embed schema/*.sql
var schema embed.FS

// Migrate applies the schema to db, one statement at a time, in file name
// order, then brings tables created by earlier versions up to it (see
// upgrade). It is safe to run any number of times.
func Migrate(ctx context.Context, db *sql.DB) error {
	if err := createTables(ctx, db); err != nil {
		return err
	}
	return upgrade(ctx, db)
}

// createTables applies the CREATE TABLE IF NOT EXISTS statements.
func createTables(ctx context.Context, db *sql.DB) error {
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

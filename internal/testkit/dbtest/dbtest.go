// Package dbtest gives tests a private MariaDB with the schema applied.
package dbtest

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/go-sql-driver/mysql" // the driver the DSNs are for

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// Start starts a private MariaDB (see testserver.StartMariaDB), applies the
// schema and returns the server and a pool on its database. Both are closed
// when the test ends.
func Start(t testing.TB) (*testserver.MariaDB, *sql.DB) {
	t.Helper()
	m := testserver.StartMariaDB(t)
	sqlDB, err := sql.Open("mysql", m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	if err := db.Migrate(context.Background(), sqlDB); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return m, sqlDB
}

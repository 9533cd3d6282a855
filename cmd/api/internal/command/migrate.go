package command

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/internal/cmdutil"
)

// Migrate applies the schema to the database UNKEY_MYSQL_DSN in environ
// names (it is idempotent) and says so on out.
func Migrate(ctx context.Context, environ []string, out io.Writer) error {
	dsn := lookupEnv(environ, "UNKEY_MYSQL_DSN")
	if dsn == "" {
		return fmt.Errorf("migrate: UNKEY_MYSQL_DSN is not set")
	}
	cfg, err := cmdutil.ParseMySQLDSN(dsn)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	sqlDB, err := cmdutil.OpenMySQL(cfg, 1)
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := db.Migrate(ctx, sqlDB); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintln(out, "schema applied to", cfg.Addr+"/"+cfg.DBName)
	return nil
}

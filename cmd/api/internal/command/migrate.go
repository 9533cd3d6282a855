package command

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/unkeyed/ratelimit/db"
)

// Migrate applies the schema to the database UNKEY_MYSQL_DSN in environ
// names (it is idempotent) and says so on out.
func Migrate(ctx context.Context, environ []string, out io.Writer) error {
	sqlDB, cfg, err := openMySQL(environ, "migrate", "")
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

package command

import (
	"database/sql"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/unkeyed/ratelimit/internal/cmdutil"
)

// openMySQL opens one connection's pool to the database UNKEY_MYSQL_DSN in
// environ names, for the command cmd; an unset DSN is an error that ends
// with hint.
func openMySQL(environ []string, cmd, hint string) (*sql.DB, *mysql.Config, error) {
	dsn := lookupEnv(environ, "UNKEY_MYSQL_DSN")
	if dsn == "" {
		return nil, nil, fmt.Errorf("%s: UNKEY_MYSQL_DSN is not set%s", cmd, hint)
	}
	cfg, err := cmdutil.ParseMySQLDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	sqlDB, err := cmdutil.OpenMySQL(cfg, 1)
	if err != nil {
		return nil, nil, err
	}
	return sqlDB, cfg, nil
}

// lookupEnv returns the last value of name in environ.
func lookupEnv(environ []string, name string) string {
	var v string
	for _, kv := range environ {
		if rest, ok := strings.CutPrefix(kv, name+"="); ok {
			v = rest
		}
	}
	return v
}

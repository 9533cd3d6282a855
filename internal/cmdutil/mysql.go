package cmdutil

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/XSAM/otelsql"
	"github.com/go-sql-driver/mysql"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// ParseMySQLDSN parses the value of UNKEY_MYSQL_DSN. The DSN must name a
// database. Parameters are sent interpolated unless the DSN says otherwise:
// one round trip a statement instead of prepare, execute and close. Sessions
// run in UTC unless the DSN sets time_zone.
func ParseMySQLDSN(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("UNKEY_MYSQL_DSN: must be a go-sql-driver/mysql DSN such as user:password@tcp(host:3306)/ratelimit: %w", err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("UNKEY_MYSQL_DSN: must name a database, as in user:password@tcp(host:3306)/ratelimit")
	}
	// ParseDSN consumes the parameters it knows, so look at the DSN itself.
	_, query, _ := strings.Cut(dsn, "?")
	if q, _ := url.ParseQuery(query); !q.Has("interpolateParams") {
		cfg.InterpolateParams = true
	}
	// The database's clock stamps every change, as UNIX_TIMESTAMP(NOW(6)):
	// in a UTC session that never meets the hour a daylight-saving change
	// repeats.
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if _, ok := cfg.Params["time_zone"]; !ok {
		cfg.Params["time_zone"] = "'+00:00'"
	}
	return cfg, nil
}

// OpenMySQL opens a pool of at most maxConns connections on cfg. Connections
// are replaced every five minutes, so a pool follows a failover behind a DNS
// name. With options (otelsql's, such as its tracer provider) every
// statement is a span. It does not connect yet.
func OpenMySQL(cfg *mysql.Config, maxConns int, opts ...otelsql.Option) (*sql.DB, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("UNKEY_MYSQL_DSN: %w", err)
	}
	var sqlDB *sql.DB
	if len(opts) > 0 {
		// Every statement a span (otelsql): what the background loops and
		// the request path ask of MySQL shows in the traces.
		sqlDB = otelsql.OpenDB(connector, append([]otelsql.Option{otelsql.WithAttributes(semconv.DBSystemNameMySQL)}, opts...)...)
	} else {
		sqlDB = sql.OpenDB(connector)
	}
	sqlDB.SetMaxOpenConns(maxConns)
	sqlDB.SetMaxIdleConns(maxConns)
	sqlDB.SetConnMaxLifetime(5 * time.Minute)
	return sqlDB, nil
}

package cmdutil

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/go-sql-driver/mysql"
)

// Log is the logging configuration both commands read.
type Log struct {
	Level  string `env:"UNKEY_LOG_LEVEL" envDefault:"info" help:"debug, info, warn or error"`
	Format string `env:"UNKEY_LOG_FORMAT" envDefault:"json" help:"json or text"`
}

// Validate reports a level that is not debug, info, warn or error, or a
// format that is not json or text, naming the variable.
func (l Log) Validate() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return fmt.Errorf("UNKEY_LOG_LEVEL: must be debug, info, warn or error, got %q", l.Level)
	}
	if l.Format != "json" && l.Format != "text" {
		return fmt.Errorf("UNKEY_LOG_FORMAT: must be json or text, got %q", l.Format)
	}
	return nil
}

// Logger returns a logger writing to w at l's level and in l's format. l
// must have passed Validate; an invalid level logs at info.
func (l Log) Logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if l.Format == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h)
}

// RouteMySQLLogs sends the MySQL driver's own messages (such as a dropped
// connection it retries) to logger at debug level. The driver has one
// process-wide logger, so the commands call this once, at start.
func RouteMySQLLogs(logger *slog.Logger) {
	_ = mysql.SetLogger(slog.NewLogLogger(logger.Handler(), slog.LevelDebug))
}

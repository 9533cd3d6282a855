package ratelimit

import (
	"io"
	"log"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// TestMain drops the MySQL driver's own log lines: the fault tests make it
// report every refused connection, and the limiter's metrics already count
// them.
func TestMain(m *testing.M) {
	mysql.SetLogger(log.New(io.Discard, "", 0))
	os.Exit(m.Run())
}

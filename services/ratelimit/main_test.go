package ratelimit

import (
	"context"
	"io"
	"log"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// quietRedisLogger drops go-redis's own log lines (and the MySQL driver's
// are dropped too): the fault tests make them report every refused
// connection, and the limiter's metrics already count them.
type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedisLogger{})
	mysql.SetLogger(log.New(io.Discard, "", 0))
	os.Exit(m.Run())
}

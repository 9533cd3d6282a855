package redisstore

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// quietLogger drops go-redis's own log lines: the fault tests make them
// report every refused connection, and the limiter's metrics already count
// them.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}

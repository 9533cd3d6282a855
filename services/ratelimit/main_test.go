package ratelimit

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// quietRedisLogger drops go-redis's own log lines: the fault tests make it
// report every refused connection, and the limiter's metrics already count
// them.
type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedisLogger{})
	os.Exit(m.Run())
}

package main

import (
	"log/slog"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
)

// TestMain quiets go-redis's own log, which the tests' faults (a killed
// Redis) would otherwise fill with failed dials, as daemon.Run does to the
// debug log in production.
func TestMain(m *testing.M) {
	redis.SetLogger(daemon.RedisLogger{Logger: slog.New(slog.DiscardHandler)})
	os.Exit(m.Run())
}

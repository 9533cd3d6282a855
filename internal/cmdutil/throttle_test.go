package cmdutil

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestThrottle: a flood of 1,500 records writes the burst, and the next
// record let through says how many were dropped.
func TestThrottle(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(Throttle(slog.NewTextHandler(&buf, nil), 50*time.Millisecond, 10))
	for range 1500 {
		logger.Warn("junk connection")
	}
	if n := strings.Count(buf.String(), "\n"); n < 10 || n > 12 {
		t.Fatalf("%d lines for 1,500 records, want the burst of 10", n)
	}
	time.Sleep(60 * time.Millisecond) // the throttle's own interval
	logger.Warn("junk connection")
	if !strings.Contains(buf.String(), "suppressed=") {
		t.Fatalf("the record after the flood does not say how many were dropped:\n%s", buf.String())
	}
}

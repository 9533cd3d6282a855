package global

import (
	"testing"
	"time"
)

// TestUntilNextTick: the wait is to the next absolute target after now on
// the limiter's clock, plus at most the jitter, whatever the wall clock says.
func TestUntilNextTick(t *testing.T) {
	anchor := time.UnixMilli(1_000_000_000_000)
	for _, tc := range []struct{ now, want time.Duration }{
		{0, time.Second}, {2500 * time.Millisecond, 500 * time.Millisecond}, {3 * time.Second, time.Second},
	} {
		for range 20 {
			got := untilNextTick(anchor, anchor.Add(tc.now), time.Second)
			if got < tc.want || got > tc.want+time.Duration(TickJitter*float64(time.Second)) {
				t.Fatalf("at anchor+%v: wait %v, want %v plus at most the jitter", tc.now, got, tc.want)
			}
		}
	}
}

// Package poll waits, in tests, for background work to make a condition
// true: one loop instead of a deadline loop in every test.
package poll

import (
	"testing"
	"time"
)

// Interval is how often Until and Within check their condition: one replay
// interval of the limiter, a hundredth of its default global intervals, and
// long enough not to busy a 2-core machine.
const Interval = 10 * time.Millisecond

// Until checks cond every Interval until it holds, and fails t, naming what
// it waited for, if it does not within within.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(within, cond) {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Within checks cond every Interval until it holds or within has passed,
// and reports whether it held.
func Within(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Interval)
	}
	return true
}

// Package poll waits, in tests, for background work to make a condition
// true: one loop instead of a deadline loop in every test.
//
// A deadline here is how long a broken test takes to fail, never a bound a
// test asserts: a condition that holds is seen within one Interval, however
// long the deadline. Tests run under the race detector on shared 2-core
// machines, where another build or test run can slow the background work
// several times over, so every deadline is stretched by Slack.
package poll

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Interval is how often Until and Within check their condition: one replay
// interval of the limiter, a hundredth of its default global intervals, and
// long enough not to busy a 2-core machine.
const Interval = 10 * time.Millisecond

// Slack multiplies every deadline given to Until, Within and Scaled. A
// test's deadline is what its wait takes on an idle machine with margin;
// with both cores of a 2-core machine busy with a second `make test`, waits
// on processes the tests start (MariaDB, Redis, restate-server) took up to
// about four times as long. UNKEY_TEST_SLACK (a whole number ≥ 1) sets it,
// for machines slower still.
var Slack = slack()

func slack() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("UNKEY_TEST_SLACK")); err == nil && n >= 1 {
		return time.Duration(n)
	}
	return 5
}

// Scaled returns d stretched by Slack: the deadline of a wait that is not
// a poll (a select on a channel, a context's timeout).
func Scaled(d time.Duration) time.Duration { return d * Slack }

// Until checks cond every Interval until it holds, and fails t, naming what
// it waited for, if it does not within Scaled(within).
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(within, cond) {
		t.Fatalf("timed out after %v waiting for %s", Scaled(within), what)
	}
}

// Within checks cond every Interval until it holds or Scaled(within) has
// passed, and reports whether it held.
func Within(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(Scaled(within))
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Interval)
	}
	return true
}

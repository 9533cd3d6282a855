package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
)

// TestModelsAcrossRegions: every model is shared as the sliding window is,
// through real servers: region a (two API processes on one Redis) spends 7
// of 10 of a fixed window, a calendar month in Berlin and a token bucket
// (refilled at one a month, so nothing refills during the test); region b
// (one process, its own Redis), which holds the keys, sees the 7 through
// MariaDB and then admits only the 3 left, each answered by its model.
func TestModelsAcrossRegions(t *testing.T) {
	t.Parallel()
	start := regionStarter(t)
	a1, a2 := start("a"), start("a")
	b := start("b")
	models := []struct{ name, fields, algorithm string }{
		{"fixed window", `"duration":2592000000,"algorithm":"ALGORITHM_FIXED_WINDOW"`, "ALGORITHM_FIXED_WINDOW"},
		{"calendar month", `"calendar":{"unit":"CALENDAR_UNIT_MONTH","timeZone":"Europe/Berlin"}`, "ALGORITHM_CALENDAR"},
		{"token bucket", `"duration":2592000000,"algorithm":"ALGORITHM_TOKEN_BUCKET"`, "ALGORITHM_TOKEN_BUCKET"},
	}
	body := func(i, cost int) string {
		return fmt.Sprintf(`{"namespace":"models","identifier":"key_%d","limit":10,"cost":%d,%s}`, i, cost, models[i].fields)
	}
	for i, mo := range models {
		// Region b has decided by the calendar before region a spends: the
		// rows it imports hold the calendar's code, not its zone.
		if _, out := b.call(t, "Limit", "", body(i, 0)); out["success"] != true || out["algorithm"] != mo.algorithm {
			t.Fatalf("%s: region b's first check: %v", mo.name, out)
		}
		if _, out := a1.call(t, "Limit", "", body(i, 4)); out["success"] != true {
			t.Fatalf("%s: a1 spending 4: %v", mo.name, out)
		}
		if _, out := a2.call(t, "Limit", "", body(i, 3)); out["success"] != true {
			t.Fatalf("%s: a2 spending 3: %v", mo.name, out)
		}
	}
	for i, mo := range models {
		poll.Until(t, 20*time.Second, mo.name+": region b sees region a's 7 of 10", func() bool {
			_, out := b.call(t, "Limit", "", body(i, 0))
			return out["remaining"] == "3"
		})
		admitted := 0
		for range 5 {
			if _, out := b.call(t, "Limit", "", body(i, 1)); out["success"] == true {
				admitted++
			}
		}
		if admitted != 3 {
			t.Errorf("%s: region b admitted %d after region a took 7 of 10, want the 3 left", mo.name, admitted)
		}
	}
}

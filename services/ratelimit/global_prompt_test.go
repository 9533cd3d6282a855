package ratelimit

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPromptFlush checks what a prompt flush publishes: a cell as soon as it
// crosses the utilization floor, then each growth of at least a tenth of the
// limit; smaller growth waits for the full flush, and cells nobody counted
// into since the last flush cost nothing.
func TestPromptFlush(t *testing.T) {
	store := newMemStore()
	clock := newFakeClock(600_000) // window 10 of one minute
	s, err := New("us", WithClock(clock), WithGlobalStore(store))
	if err != nil {
		t.Fatal(err)
	}
	us := &region{Service: s, st: newGlobalState()}
	want := func(when string, rowsWant ...string) {
		t.Helper()
		if got := store.dump(); strings.Join(got, " ") != strings.Join(rowsWant, " ") {
			t.Fatalf("rows %s = %v, want %v", when, got, rowsWant)
		}
	}
	spend(t, s, "k", 100, 49)
	us.promptFlush()
	want("below the floor (49 of 100)")
	spend(t, s, "k", 100, 1)
	us.promptFlush()
	want("after crossing the floor", "k/10/us=50")
	spend(t, s, "k", 100, 9)
	us.promptFlush()
	want("after growing by 9, less than a step of 10", "k/10/us=50")
	us.flush()
	want("after a full flush", "k/10/us=59")
	spend(t, s, "k", 100, 10)
	us.promptFlush()
	want("after growing by a step", "k/10/us=69")

	// Many cells above the floor; only those counted into since are looked
	// at, and only those that grew by a step are written.
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = "hot_" + itoa(int64(i))
		if !mustLimit(t, s, req(ids[i], 100, time.Minute, 60)).Success {
			t.Fatal("denied")
		}
	}
	us.promptFlush()
	if n := len(store.dump()); n != 201 {
		t.Fatalf("%d rows after 200 cells crossed the floor, want 201", n)
	}
	before := store.published.Load()
	calls := store.publishes.Load()
	us.promptFlush()
	if store.publishes.Load() != calls {
		t.Fatal("a prompt flush with nothing counted since wrote to the store")
	}
	for _, id := range ids[:10] {
		mustLimit(t, s, req(id, 100, time.Minute, 10))
	}
	for _, id := range ids[10:20] {
		mustLimit(t, s, req(id, 100, time.Minute, 1))
	}
	us.promptFlush()
	if got := store.published.Load() - before; got != 10 {
		t.Fatalf("prompt flush wrote %d rows, want the 10 cells that grew by a step", got)
	}
	us.flush()
	if got := store.published.Load() - before; got != 20 {
		t.Fatalf("prompt and full flush wrote %d rows, want 20: the full flush writes the 10 smaller growths", got)
	}
	if got := testutil.ToFloat64(s.metrics.queueOverflow.WithLabelValues("flush")); got != 0 {
		t.Fatalf("%v cells did not fit the flush queue", got)
	}
}

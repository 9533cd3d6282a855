package ratelimit

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// TestPromptFlush checks what a prompt flush publishes: a cell as soon as it
// crosses the floor (a twentieth of the limit for a minute
// window: its presence), then, while no other region holds it, nothing more
// until half the limit; then each growth of at least a tenth of the limit;
// smaller growth waits for the full flush, and cells nobody counted into
// since the last flush cost nothing.
func TestPromptFlush(t *testing.T) {
	mem := storetest.NewMemGlobal()
	clock := newFakeClock(600_000) // window 10 of one minute
	s, err := New("us", WithClock(clock), WithGlobalStore(mem))
	if err != nil {
		t.Fatal(err)
	}
	us := &region{Service: s}
	want := func(when string, rowsWant ...string) {
		t.Helper()
		if got := mem.Dump(); strings.Join(got, " ") != strings.Join(rowsWant, " ") {
			t.Fatalf("rows %s = %v, want %v", when, got, rowsWant)
		}
	}
	spend(t, s, "k", 100, 4)
	us.promptFlush()
	want("below the floor (4 of 100; a twentieth for a minute window)")
	spend(t, s, "k", 100, 1)
	us.promptFlush()
	want("after crossing the floor: its presence", "k/10/us=5")
	spend(t, s, "k", 100, 40)
	us.promptFlush()
	us.flush()
	want("at 45, shared by no other region: the presence only", "k/10/us=5")
	spend(t, s, "k", 100, 5)
	us.promptFlush()
	want("at half the limit", "k/10/us=50")
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
	if n := len(mem.Dump()); n != 201 {
		t.Fatalf("%d rows after 200 cells crossed the floor, want 201", n)
	}
	before := mem.Published()
	calls := mem.Publishes()
	us.promptFlush()
	if mem.Publishes() != calls {
		t.Fatal("a prompt flush with nothing counted since wrote to the mem")
	}
	for _, id := range ids[:10] {
		mustLimit(t, s, req(id, 100, time.Minute, 10))
	}
	for _, id := range ids[10:20] {
		mustLimit(t, s, req(id, 100, time.Minute, 1))
	}
	us.promptFlush()
	if got := mem.Published() - before; got != 10 {
		t.Fatalf("prompt flush wrote %d rows, want the 10 cells that grew by a step", got)
	}
	us.flush()
	if got := mem.Published() - before; got != 20 {
		t.Fatalf("prompt and full flush wrote %d rows, want 20: the full flush writes the 10 smaller growths", got)
	}
	if got := testutil.ToFloat64(s.metrics.queueOverflow.WithLabelValues("flush")); got != 0 {
		t.Fatalf("%v cells did not fit the flush queue", got)
	}
}

// TestFloorsAndSteps: windows shorter than a minute keep the floor at half
// the limit; a region's flush step is a tenth of the limit scaled by twice
// its share of the cell (at most one), so a region with a tenth of a key's
// count publishes every fiftieth of the limit, and two regions sharing a key
// evenly every tenth.
func TestFloorsAndSteps(t *testing.T) {
	s, err := New("us", WithGlobalStore(storetest.NewMemGlobal()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		limit, durMs, want int64
	}{
		{100, 60_000, 5}, {100, 600_000, 5}, {100, 59_999, 50}, {100, 1_000, 50}, {10, 60_000, 1}, {1, 60_000, 1},
	} {
		if got := s.global.Floor(tc.limit, tc.durMs); got != tc.want {
			t.Errorf("floor(%d, %d ms) = %d, want %d", tc.limit, tc.durMs, got, tc.want)
		}
	}
	for _, tc := range []struct {
		limit, own, others, want int64
	}{
		{100, 50, 0, 10}, {100, 10, 90, 2}, {1000, 10, 90, 20}, {1000, 50, 50, 100}, {1000, 30, 70, 60}, {100, 1, 1000, 1},
	} {
		if got := s.global.FlushStep(tc.limit, tc.own, tc.others); got != tc.want {
			t.Errorf("flushStep(%d, own %d, others %d) = %d, want %d", tc.limit, tc.own, tc.others, got, tc.want)
		}
	}
}

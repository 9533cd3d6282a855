package ratelimit

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/global"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// region is one region's limiter on a shared database, with the global loop
// driven by hand.
type region struct {
	*Service
}

func newRegion(t *testing.T, name string, mem store.Global, clock Clock, opts ...Option) *region {
	t.Helper()
	s, err := New(name, append([]Option{WithClock(clock), WithGlobalStore(mem)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &region{Service: s}
}

// flush is a full flush; promptFlush a prompt one.
func (r *region) flush()       { r.global.Flush(context.Background(), true) }
func (r *region) promptFlush() { r.global.Flush(context.Background(), false) }
func (r *region) sync()        { r.global.Sync(context.Background()) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func spend(t *testing.T, s *Service, id string, limit, n int64) {
	t.Helper()
	for i := int64(0); i < n; i++ {
		if !mustLimit(t, s, req(id, limit, time.Minute, 1)).Success {
			t.Fatalf("request %d of %d on %s denied", i+1, n, id)
		}
	}
}

func TestGlobalCounterInvariants(t *testing.T) {
	mem := storetest.NewMemGlobal()
	clock := newFakeClock(600_000) // window 10 of one minute
	us, eu := newRegion(t, "us", mem, clock), newRegion(t, "eu", mem, clock)

	// Below the floor (5 of 100, a twentieth for a minute window) nothing
	// is published.
	spend(t, us.Service, "k", 100, 4)
	us.flush()
	if got := mem.Dump(); len(got) != 0 {
		t.Fatalf("rows below the floor: %v", got)
	}
	spend(t, us.Service, "k", 100, 2) // 6 of 100
	us.flush()
	us.flush() // unchanged: the change filter writes nothing
	if got := testutil.ToFloat64(us.metrics.global.Writes); got != 1 {
		t.Fatalf("%v rows written for one changed cell flushed twice, want 1", got)
	}
	// eu imports us's 6 and counts it in its decisions.
	eu.sync()
	if resp := mustLimit(t, eu.Service, req("k", 100, time.Minute, 0)); resp.Remaining != 94 {
		t.Fatalf("eu sees %d remaining after us spent 6 of 100, want 94", resp.Remaining)
	}
	// eu spends 3 (below its own floor, but the cell is shared already, so
	// eu publishes too) and imports are never published back.
	spend(t, eu.Service, "k", 100, 3)
	for range 3 {
		us.flush()
		eu.flush()
		us.sync()
		eu.sync()
	}
	want := []string{"k/10/eu=3", "k/10/us=6"}
	if got := mem.Dump(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("rows after several rounds = %v, want %v (imported counts republished?)", got, want)
	}
	if resp := mustLimit(t, us.Service, req("k", 100, time.Minute, 0)); resp.Remaining != 91 {
		t.Fatalf("us sees %d remaining, want 91 (6 own + 3 imported)", resp.Remaining)
	}

	// An older, delayed publish never lowers a component; publishing twice
	// is harmless.
	cell := store.CellKey{Workspace: "ws", Namespace: "ns", Identifier: "k", Duration: time.Minute, Sequence: 10}
	for _, n := range []int64{2, 6, 6} {
		if _, err := mem.Publish(context.Background(), "us", []store.CellCount{{Key: cell, Count: n}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := mem.Dump(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("rows after a stale and a repeated publish = %v, want %v", got, want)
	}

	// The own row only raises the regional count: another process of us
	// published 8; this process holds 6 and rises to 8. A lower own row
	// changes nothing.
	if _, err := mem.Publish(context.Background(), "us", []store.CellCount{{Key: cell, Count: 8}}); err != nil {
		t.Fatal(err)
	}
	us2 := newRegion(t, "us", mem, clock)
	spend(t, us2.Service, "k", 100, 1)
	us.sync()
	us2.sync()
	w := us.windows.Find(&cells.Key{Workspace: "ws", Namespace: "ns", Identifier: "k", Period: period.OfLength(60_000)})
	cur, _, _ := w.CellsAt(10, true)
	if got := cur.Count.Load(); got != 8 {
		t.Fatalf("us's regional count = %d after its own row says 8, want 8", got)
	}
	w2 := us2.windows.Find(&cells.Key{Workspace: "ws", Namespace: "ns", Identifier: "k", Period: period.OfLength(60_000)})
	cur2, _, _ := w2.CellsAt(10, true)
	if cur2.Count.Load() != 8 || cur2.Global.Load() != 3 {
		t.Fatalf("us2: count %d global %d, want 8 and 3", cur2.Count.Load(), cur2.Global.Load())
	}
}

// TestGlobalConvergesInAnyOrder publishes and imports in different orders
// across three regions; every order ends with the same sums.
func TestGlobalConvergesInAnyOrder(t *testing.T) {
	orders := [][]string{
		{"a.flush", "b.flush", "c.flush", "a.sync", "b.sync", "c.sync"},
		{"c.sync", "c.flush", "b.sync", "a.sync", "b.flush", "a.flush", "c.sync", "b.sync", "a.sync"},
		{"b.flush", "a.sync", "c.flush", "b.sync", "a.flush", "c.sync", "a.sync", "b.sync"},
	}
	var results []string
	for _, order := range orders {
		mem := storetest.NewMemGlobal()
		clock := newFakeClock(600_000)
		regions := map[string]*region{}
		for i, name := range []string{"a", "b", "c"} {
			regions[name] = newRegion(t, name, mem, clock)
			spend(t, regions[name].Service, "k", 12, int64(6+i)) // 6, 7, 8 of 12: all above the floor
		}
		for _, step := range order {
			name, op, _ := strings.Cut(step, ".")
			if op == "flush" {
				regions[name].flush()
			} else {
				regions[name].sync()
			}
		}
		// Finish with a full round, as the loops would.
		for _, name := range []string{"a", "b", "c"} {
			regions[name].flush()
		}
		var sums []string
		for _, name := range []string{"a", "b", "c"} {
			regions[name].sync()
			w := regions[name].windows.Find(&cells.Key{Workspace: "ws", Namespace: "ns", Identifier: "k", Period: period.OfLength(60_000)})
			cur, _, _ := w.CellsAt(10, true)
			sums = append(sums, name+":"+itoa(cur.Count.Load())+"+"+itoa(cur.Global.Load()))
		}
		results = append(results, strings.Join(sums, " ")+" | "+strings.Join(mem.Dump(), " "))
	}
	want := "a:6+15 b:7+14 c:8+13 | k/10/a=6 k/10/b=7 k/10/c=8"
	for i, r := range results {
		if r != want {
			t.Fatalf("order %d ended with %q, want %q", i, r, want)
		}
	}
}

// TestSpeculativeCountsAreNeverPublished holds a batch open (speculative increments
// applied, not committed) while flushing: only committed counts reach the
// store.
func TestSpeculativeCountsAreNeverPublished(t *testing.T) {
	mem := storetest.NewMemGlobal()
	clock := newFakeClock(600_000)
	us := newRegion(t, "us", mem, clock)
	spend(t, us.Service, "k", 100, 4) // below the floor of 5
	w := us.windows.Find(&cells.Key{Workspace: "ws", Namespace: "ns", Identifier: "k", Period: period.OfLength(60_000)})
	cur, _, _ := w.CellsAt(10, true)
	if !w.ApplySpeculative(cur, cur.Count.Load(), 3) { // a batch in flight: 7 of 100
		t.Fatal("speculative increment failed")
	}
	us.flush()
	if got := mem.Dump(); len(got) != 0 {
		t.Fatalf("speculative increments were published: %v", got)
	}
	w.Commit(cur, 3)
	us.flush()
	if got := mem.Dump(); strings.Join(got, " ") != "k/10/us=7" {
		t.Fatalf("rows after commit = %v, want k/10/us=7", got)
	}
}

// TestStoreDownMidFlush: with the store failing, decisions go on, the flush
// and the sync fail and count it, and once the store is back the unwritten
// rows are written.
func TestStoreDownMidFlush(t *testing.T) {
	mem := storetest.NewMemGlobal()
	faulty := storetest.NewFaultyGlobal(mem)
	clock := newFakeClock(600_000)
	us := newRegion(t, "us", faulty, clock)
	spend(t, us.Service, "k", 10, 6)
	faulty.SetDown(true)
	spend(t, us.Service, "k", 10, 2) // requests unaffected
	us.flush()
	us.sync()
	if got := testutil.ToFloat64(us.metrics.global.WriteErrors); got != 1 {
		t.Fatalf("write errors = %v, want 1", got)
	}
	if got := testutil.ToFloat64(us.metrics.global.SyncErrors); got != 1 {
		t.Fatalf("sync errors = %v, want 1", got)
	}
	faulty.SetDown(false)
	us.flush()
	if got := mem.Dump(); len(got) != 1 || got[0] != "k/10/us=8" {
		t.Fatalf("rows after the mem came back = %v, want k/10/us=8", got)
	}
}

// TestFutureRowsAreIgnored: a row dated a thousand windows ahead, from a
// region with a broken clock or a hostile writer, neither resets a spent key
// nor creates state; it is counted.
func TestFutureRowsAreIgnored(t *testing.T) {
	mem := storetest.NewMemGlobal()
	clock := newFakeClock(600_000)
	a := newRegion(t, "a", mem, clock)
	spend(t, a.Service, "spent", 10, 10)
	seq := int64(600_000/60_000) + 1001
	mem.Insert(store.CellKey{Workspace: "ws", Namespace: "ns", Identifier: "spent", Duration: time.Minute, Sequence: seq}, "b", 1, 0, 1)
	a.sync()
	if resp := mustLimit(t, a.Service, req("spent", 10, time.Minute, 1)); resp.Success {
		t.Fatalf("a future row reset the budget: %+v", resp)
	}
	if got := testutil.ToFloat64(a.metrics.global.RowsFuture); got != 1 {
		t.Fatalf("future rows counted = %v, want 1", got)
	}
}

// TestSyncCreatesWindowsOnlyAboveTheFloor: a process that holds no window
// for a key creates one on sync only when the other regions' sum reaches
// the floor of the limit they published; keys only shared, or only this
// region's own, cost it nothing; a key it holds imports any count.
func TestSyncCreatesWindowsOnlyAboveTheFloor(t *testing.T) {
	mem := storetest.NewMemGlobal()
	clock := newFakeClock(600_000)
	b := newRegion(t, "b", mem, clock)
	spend(t, b.Service, "held", 10, 1)
	insert := func(id, region string, count, limit int64) {
		mem.Insert(store.CellKey{Workspace: "ws", Namespace: "ns", Identifier: id, Duration: time.Minute, Sequence: 10}, region, count, limit, 600_000)
	}
	insert("hot", "a", 6, 100)  // above a twentieth of 100
	insert("thin", "a", 2, 100) // published only because another region shares it
	insert("mine", "b", 9, 100) // this region's own row
	insert("held", "a", 2, 10)  // below the floor, but b holds the key
	b.sync()
	for id, want := range map[string]bool{"hot": true, "thin": false, "mine": false, "held": true} {
		if got := b.windows.Find(&cells.Key{Workspace: "ws", Namespace: "ns", Identifier: id, Period: period.OfLength(60_000)}) != nil; got != want {
			t.Errorf("window for %q after sync: %v, want %v", id, got, want)
		}
	}
	if got := mustLimit(t, b.Service, req("held", 10, time.Minute, 0)).Remaining; got != 7 {
		t.Fatalf("held key: remaining %d, want 7 (1 own + 2 imported)", got)
	}
	if got := testutil.ToFloat64(b.metrics.global.EntriesCreated); got != 1 {
		t.Fatalf("windows created by sync = %v, want 1", got)
	}
}

// TestSyncReadsOnlyChangedRows: the first sync reads every live cell; each
// later one only those changed since the previous sync began, less
// global.SyncLookback; every global.FullSyncInterval everything again.
func TestSyncReadsOnlyChangedRows(t *testing.T) {
	mem := storetest.NewMemGlobal()
	clock := newFakeClock(600_000)
	b := newRegion(t, "b", mem, clock)
	for i := range 1000 {
		mem.Insert(store.CellKey{Workspace: "ws", Namespace: "ns", Identifier: "old" + itoa(int64(i)), Duration: time.Hour, Sequence: 0}, "a", 60, 100, 540_000)
	}
	b.sync()
	if got := testutil.ToFloat64(b.metrics.global.RowsLastPoll); got != 1000 {
		t.Fatalf("first sync read %v rows, want all 1000", got)
	}
	a := newRegion(t, "a", mem, clock)
	clock.Advance(time.Second)
	for i := range 10 {
		spend(t, a.Service, "new"+itoa(int64(i)), 10, 6)
	}
	a.flush()
	clock.Advance(time.Second)
	b.sync()
	if got := testutil.ToFloat64(b.metrics.global.RowsLastPoll); got != 10 {
		t.Fatalf("second sync read %v rows, want the 10 changed", got)
	}
	if got := mustLimit(t, b.Service, req("new3", 10, time.Minute, 0)).Remaining; got != 4 {
		t.Fatalf("a changed key in b: remaining %d, want 4", got)
	}
	clock.Advance(global.FullSyncInterval)
	b.sync()
	// The second sync starts from where the first began by the store's
	// clock: its first tick.
	want := []time.Time{{}, time.UnixMilli(storetest.MemGlobalEpoch + 1000).Add(-global.SyncLookback), {}}
	if len(mem.Sinces()) != 3 || !mem.Sinces()[0].Equal(want[0]) || !mem.Sinces()[1].Equal(want[1]) || !mem.Sinces()[2].IsZero() {
		t.Fatalf("syncs asked for changes since %v, want %v", mem.Sinces(), want)
	}
}

package storetest

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// TestGlobal checks that the global stores newStore returns do what the
// limiter relies on: a region reads its own component and the sum of the
// others' with the largest limit they published; a component only rises;
// a cell's refunds rise apart from its count;
// keys that differ in any field are different cells; a cell is left out
// once the window after its own has ended; a sync from the asOf of an
// earlier one returns every cell published since; Publish reports every
// count written. Each subtest works in a workspace of its own, so the
// stores may share one database.
func TestGlobal(t *testing.T, newStore func(t *testing.T) store.Global) {
	ctx := context.Background()
	t.Run("OwnAndOthers", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		k := key(ws, "alice", 1)
		publish(t, s, "a", store.CellCount{Key: k, Count: 5, Limit: 10})
		publish(t, s, "b", store.CellCount{Key: k, Count: 4, Limit: 20})
		publish(t, s, "c", store.CellCount{Key: k, Count: 2, Limit: 30})
		for region, want := range map[string]store.GlobalCount{
			"a": {Key: k, Own: 5, Others: 6, OthersLimit: 30},
			"c": {Key: k, Own: 2, Others: 9, OthersLimit: 20},
			"d": {Key: k, Own: 0, Others: 11, OthersLimit: 30},
		} {
			got := syncOf(t, s, region, ws, time.Time{})
			if len(got) != 1 || got[k] != want {
				t.Errorf("sync of region %s: %v, want %v", region, got, want)
			}
		}
	})
	t.Run("AComponentOnlyRises", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		k := key(ws, "alice", 1)
		for _, n := range []int64{5, 3, 7, 6} {
			publish(t, s, "a", store.CellCount{Key: k, Count: n, Limit: 10})
		}
		if got := syncOf(t, s, "b", ws, time.Time{})[k].Others; got != 7 {
			t.Errorf("after publishing 5, 3, 7, 6: others %d, want 7", got)
		}
	})
	t.Run("KeysThatDifferAreDifferentCells", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		keys := distinctKeys(ws)
		counts := make([]store.CellCount, len(keys))
		for i, k := range keys {
			counts[i] = store.CellCount{Key: k, Count: int64(i + 1), Limit: 100}
		}
		sortCounts(counts)
		publish(t, s, "a", counts...)
		got := syncOf(t, s, "b", "", time.Time{})
		for _, c := range counts {
			if got[c.Key].Others != c.Count {
				t.Errorf("cell %+v: others %d, want %d", c.Key, got[c.Key].Others, c.Count)
			}
		}
	})
	t.Run("AnUnknownLimitKeepsTheKnownOne", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		k := key(ws, "alice", 1)
		publish(t, s, "a", store.CellCount{Key: k, Count: 5, Limit: 10})
		publish(t, s, "a", store.CellCount{Key: k, Count: 6})
		if got := syncOf(t, s, "b", ws, time.Time{})[k]; got.OthersLimit != 10 || got.Others != 6 {
			t.Errorf("after a publish without a limit: %+v, want others 6 with limit 10", got)
		}
	})
	t.Run("RefundsRiseApartFromTheirCell", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		k := key(ws, "alice", 1)
		r := k
		r.Refunds = true
		publish(t, s, "a", store.CellCount{Key: k, Count: 9, Limit: 10}, store.CellCount{Key: r, Count: 4, Limit: 10})
		publish(t, s, "b", store.CellCount{Key: r, Count: 1, Limit: 10})
		// A later publish of the count alone, and a stale one of the
		// refunds, lower nothing.
		publish(t, s, "a", store.CellCount{Key: k, Count: 10, Limit: 10})
		publish(t, s, "a", store.CellCount{Key: r, Count: 3, Limit: 10})
		got := syncOf(t, s, "b", ws, time.Time{})
		if g := got[k]; g.Own != 0 || g.Others != 10 {
			t.Errorf("cell seen from b: own %d, others %d; want 0 and 10", g.Own, g.Others)
		}
		if g := got[r]; g.Own != 1 || g.Others != 4 {
			t.Errorf("refunds seen from b: own %d, others %d; want 1 and 4", g.Own, g.Others)
		}
	})
	t.Run("ExpiredCellsAreLeftOut", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		k := key(ws, "alice", 1)
		publish(t, s, "a", store.CellCount{Key: k, Count: 1, Limit: 10})
		expiry := time.UnixMilli(k.ExpiresAt())
		for _, tc := range []struct {
			now  time.Time
			live bool
		}{{expiry.Add(-time.Millisecond), true}, {expiry, false}} {
			rows, _, err := s.Sync(ctx, "b", tc.now, time.Time{})
			if err != nil {
				t.Fatalf("sync: %v", err)
			}
			found := false
			for _, r := range rows {
				found = found || r.Key == k
			}
			if found != tc.live {
				t.Errorf("sync at %v (the cell expires at %v): returned %v, want %v", tc.now, expiry, found, tc.live)
			}
		}
	})
	t.Run("ASyncFromAsOfMissesNothing", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		first, second := key(ws, "first", 1), key(ws, "second", 1)
		publish(t, s, "a", store.CellCount{Key: first, Count: 1, Limit: 10})
		_, asOf, err := s.Sync(ctx, "b", time.Now(), time.Time{})
		if err != nil {
			t.Fatalf("sync: %v", err)
		}
		publish(t, s, "a", store.CellCount{Key: second, Count: 2, Limit: 10})
		publish(t, s, "a", store.CellCount{Key: first, Count: 3, Limit: 10})
		got := syncOf(t, s, "b", ws, asOf)
		if got[second].Others != 2 || got[first].Others != 3 {
			t.Errorf("sync since %v: %v, want first at 3 and second at 2", asOf, got)
		}
		_, later, err := s.Sync(ctx, "b", time.Now(), asOf)
		if err != nil {
			t.Fatalf("sync: %v", err)
		}
		if later.Before(asOf) {
			t.Errorf("asOf went back from %v to %v", asOf, later)
		}
	})
	t.Run("PublishReportsWhatItWrote", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		counts := make([]store.CellCount, 2500) // more than one statement's rows
		for i := range counts {
			counts[i] = store.CellCount{Key: key(ws, "user_"+strconv.Itoa(i), 1), Count: 1, Limit: 10}
		}
		sortCounts(counts)
		if n := publish(t, s, "a", counts...); n != len(counts) {
			t.Errorf("publish of %d counts wrote %d", len(counts), n)
		}
		if got := syncOf(t, s, "b", ws, time.Time{}); len(got) != len(counts) {
			t.Errorf("sync found %d of the %d cells published", len(got), len(counts))
		}
	})
}

// publish publishes counts for region and fails t on an error.
func publish(t *testing.T, s store.Global, region string, counts ...store.CellCount) int {
	t.Helper()
	n, err := s.Publish(context.Background(), region, counts)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return n
}

// syncOf syncs for region at the current time and returns the cells of
// workspace ws (all of them for "") by key.
func syncOf(t *testing.T, s store.Global, region, ws string, since time.Time) map[store.CellKey]store.GlobalCount {
	t.Helper()
	rows, _, err := s.Sync(context.Background(), region, time.Now(), since)
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	out := map[store.CellKey]store.GlobalCount{}
	for _, r := range rows {
		if ws == "" || r.Key.Workspace == ws {
			out[r.Key] = r
		}
	}
	return out
}

func sortCounts(counts []store.CellCount) {
	slices.SortFunc(counts, func(a, b store.CellCount) int { return store.CompareKeys(&a.Key, &b.Key) })
}

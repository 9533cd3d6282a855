package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/overrides/store"
)

// TestOverrides checks that the overrides stores newStore returns do what
// package overrides relies on: an override keeps its id while it lives and
// a revived one takes the new id; a burst is kept as set; every change, a deletion too, takes a
// larger revision than the row's last and one at least as large as a
// Revision read before it; Get and List see live overrides only, List in
// identifier order from a cursor; Changes returns deletions too; Page reads
// every live override once; identifiers that differ in any byte are
// different overrides. Each subtest works in a workspace of its own, so the
// stores may share one database.
func TestOverrides(t *testing.T, newStore func(t *testing.T) store.Overrides) {
	ctx := context.Background()
	t.Run("AnOverrideKeepsItsID", func(t *testing.T) {
		s, ws := newStore(t), workspace()
		first := set(t, s, override(ws, "ns", "alice", "ovr_1", 10))
		if first.ID != "ovr_1_"+ws || first.Limit != 10 || first.Deleted || first.Revision <= 0 {
			t.Fatalf("a new override: %+v", first)
		}
		second := set(t, s, override(ws, "ns", "alice", "ovr_2", 5))
		if second.ID != "ovr_1_"+ws || second.Limit != 5 || second.Revision <= first.Revision {
			t.Fatalf("replacing it: %+v, want id ovr_1, limit 5, a revision above %d", second, first.Revision)
		}
		got, err := s.Get(ctx, ws, "ns", "alice")
		if err != nil || got.ID != "ovr_1_"+ws || got.Limit != 5 || got.Duration != time.Minute {
			t.Fatalf("get: %+v, %v", got, err)
		}
	})
	t.Run("ABurstIsKept", func(t *testing.T) {
		s, ws := newStore(t), workspace()
		o := override(ws, "ns", "bucket", "ovr_1", 10)
		o.Burst = 250
		set(t, s, o)
		got, err := s.Get(ctx, ws, "ns", "bucket")
		if err != nil || got.Burst != 250 {
			t.Fatalf("get: %+v, %v; want burst 250", got, err)
		}
		o.Burst = 0
		set(t, s, o)
		if got, err := s.Get(ctx, ws, "ns", "bucket"); err != nil || got.Burst != 0 {
			t.Fatalf("set again without a burst: %+v, %v; want burst 0", got, err)
		}
	})
	t.Run("AShadowSwitchIsKept", func(t *testing.T) {
		s, ws := newStore(t), workspace()
		set(t, s, store.Override{ID: "ovr_1_" + ws, Workspace: ws, Namespace: "ns", Identifier: store.NamespaceSwitch, Shadow: true})
		got, err := s.Get(ctx, ws, "ns", store.NamespaceSwitch)
		if err != nil || !got.Shadow || !got.KeepsLimit() || got.Limit != 0 {
			t.Fatalf("get: %+v, %v; want a shadow switch that keeps the limits", got, err)
		}
		o := override(ws, "ns", "alice", "ovr_2", 10)
		o.Shadow = true
		set(t, s, o)
		o.Shadow = false
		set(t, s, o)
		if got, err := s.Get(ctx, ws, "ns", "alice"); err != nil || got.Shadow || got.Limit != 10 {
			t.Fatalf("set again enforced: %+v, %v; want shadow off", got, err)
		}
	})
	t.Run("ADeletionIsAChange", func(t *testing.T) {
		s, ws := newStore(t), workspace()
		live := set(t, s, override(ws, "ns", "alice", "ovr_1", 10))
		gone, err := s.Delete(ctx, ws, "ns", "alice")
		if err != nil || !gone.Deleted || gone.ID != "ovr_1_"+ws || gone.Revision <= live.Revision {
			t.Fatalf("delete: %+v, %v; want deleted, id ovr_1, a revision above %d", gone, err, live.Revision)
		}
		if _, err := s.Get(ctx, ws, "ns", "alice"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("get after delete: %v, want ErrNotFound", err)
		}
		if _, err := s.Delete(ctx, ws, "ns", "alice"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a second delete: %v, want ErrNotFound", err)
		}
		if _, err := s.Delete(ctx, ws, "ns", "nobody"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("delete of an override never set: %v, want ErrNotFound", err)
		}
		revived := set(t, s, override(ws, "ns", "alice", "ovr_2", 3))
		if revived.ID != "ovr_2_"+ws || revived.Deleted || revived.Revision <= gone.Revision {
			t.Fatalf("set again after delete: %+v, want id ovr_2, live, a revision above %d", revived, gone.Revision)
		}
	})
	t.Run("ChangesFromARevision", func(t *testing.T) {
		s, ws := newStore(t), workspace()
		set(t, s, override(ws, "ns", "old", "ovr_old", 1))
		set(t, s, override(ws, "ns", "doomed", "ovr_doomed", 1))
		from, err := s.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		set(t, s, override(ws, "ns", "new", "ovr_new", 2))
		if _, err := s.Delete(ctx, ws, "ns", "doomed"); err != nil {
			t.Fatal(err)
		}
		changes, err := s.Changes(ctx, from)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]store.Change{}
		for _, c := range changes {
			if c.Revision < from {
				t.Errorf("change %+v has a revision below %d", c, from)
			}
			if c.Workspace == ws {
				got[c.Identifier] = c
			}
		}
		if c, ok := got["new"]; !ok || c.Deleted || c.Limit != 2 {
			t.Errorf("changes lack the override set after revision %d: %v", from, got)
		}
		if c, ok := got["doomed"]; !ok || !c.Deleted {
			t.Errorf("changes lack the deletion after revision %d: %v", from, got)
		}
		if _, ok := got["old"]; ok {
			t.Errorf("changes hold an override last changed before revision %d: %v", from, got)
		}
	})
	t.Run("ListInIdentifierOrder", func(t *testing.T) {
		s, ws := newStore(t), workspace()
		for _, id := range []string{"c", "a", "e", "b", "d"} {
			set(t, s, override(ws, "ns", id, "ovr_"+id, 1))
		}
		set(t, s, override(ws, "other", "a0", "ovr_other", 1))
		if _, err := s.Delete(ctx, ws, "ns", "e"); err != nil {
			t.Fatal(err)
		}
		var pages [][]string
		for after := ""; ; {
			page, err := s.List(ctx, ws, "ns", after, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			var ids []string
			for _, o := range page {
				ids = append(ids, o.Identifier)
			}
			pages = append(pages, ids)
			after = ids[len(ids)-1]
		}
		if fmt.Sprint(pages) != "[[a b] [c d]]" {
			t.Errorf("pages of two: %v, want [[a b] [c d]]", pages)
		}
	})
	t.Run("PageReadsEveryLiveOverrideOnce", func(t *testing.T) {
		s, ws := newStore(t), workspace()
		var want []string
		for i := range 25 {
			id := fmt.Sprint("user_", i)
			set(t, s, override(ws, "ns", id, "ovr_"+id, 1))
			want = append(want, id)
		}
		set(t, s, override(ws, "ns", "gone", "ovr_gone", 1))
		if _, err := s.Delete(ctx, ws, "ns", "gone"); err != nil {
			t.Fatal(err)
		}
		var got []string
		for after := int64(0); ; {
			page, last, err := s.Page(ctx, after, 7)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			if last <= after {
				t.Fatalf("a page after %d ended at %d", after, last)
			}
			for _, c := range page {
				if c.Workspace == ws {
					got = append(got, c.Identifier)
				}
			}
			after = last
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("pages held %v, want every live override once: %v", got, want)
		}
	})
	t.Run("IdentifiersAreByteExact", func(t *testing.T) {
		s, ws := newStore(t), workspace()
		ids := []string{"alice", "alice ", "Alice", "alicé", "alice*"}
		for i, id := range ids {
			set(t, s, override(ws, "ns", id, fmt.Sprint("ovr_", i), int64(i+1)))
		}
		for i, id := range ids {
			o, err := s.Get(ctx, ws, "ns", id)
			if err != nil || o.Limit != int64(i+1) {
				t.Errorf("get %q: %+v, %v; want limit %d", id, o, err, i+1)
			}
		}
	})
}

func workspace() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "ws_" + hex.EncodeToString(b[:])
}

// override returns an override of ws with id made unique in the store, as
// the ids callers give are.
func override(ws, ns, identifier, id string, limit int64) store.Override {
	return store.Override{ID: id + "_" + ws, Workspace: ws, Namespace: ns, Identifier: identifier, Limit: limit, Duration: time.Minute}
}

// set sets o and fails t on an error.
func set(t *testing.T, s store.Overrides, o store.Override) store.Change {
	t.Helper()
	c, err := s.Set(context.Background(), o)
	if err != nil {
		t.Fatalf("set %v: %v", o, err)
	}
	return c
}

// Package storetest holds the contract suite every penalties store runs
// ([TestPenalties]): what package penalties relies on from its store,
// checked on the store itself. Package memstore (in memory) and package
// mysqlstore (MySQL) run it.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/unkeyed/ratelimit/services/penalties/store"
)

// TestPenalties checks that the stores newStore returns do what package
// penalties relies on: a merge keeps the later state in store.Merge's
// order (the latest event: a block's start or a lift) whatever order
// writes arrive in, and a replayed write changes nothing; Get finds a box by its exact key; List pages a namespace's
// boxes whose block has not ended, in identifier order; Changes returns
// what was written since a clock it returned, and from 0 every box that
// still matters. Each subtest works in a workspace of its own, so the
// stores may share one database. now is the stores' clock in unix ms.
func TestPenalties(t *testing.T, newStore func(t *testing.T) store.Penalties, now func() int64) {
	ctx := context.Background()
	t.Run("MergesKeepTheLaterBlock", func(t *testing.T) {
		s, ws := newStore(t), workspace()
		t0 := now()
		k := store.Key{Workspace: ws, Namespace: "ns", Identifier: "alice"}
		later := store.Block{Key: k, Start: t0 + 10, Until: t0 + 70_000}
		earlier := store.Block{Key: k, Start: t0, Until: t0 + 60_000}
		for _, b := range []store.Block{later, earlier, later, earlier} {
			if err := s.Merge(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Get(ctx, k)
		if err != nil || got != later {
			t.Fatalf("after merging both blocks twice, in turn: %+v, %v; want %+v", got, err, later)
		}
		clear := store.Block{Key: k, Cleared: t0 + 20}
		for _, b := range []store.Block{clear, earlier, later, {Key: k, Cleared: t0 + 5}} {
			if err := s.Merge(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		got, _ = s.Get(ctx, k)
		if got != clear || !got.Void() {
			t.Fatalf("after a lift and the blocks that began before it: %+v, want the lift %+v", got, clear)
		}
		// A block begun after the lift, by a process that had not read it,
		// ending before the lifted one.
		after := store.Block{Key: k, Start: t0 + 21, Until: t0 + 30_000}
		for _, b := range []store.Block{after, later, clear, after} {
			if err := s.Merge(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		if got, _ = s.Get(ctx, k); got != after {
			t.Fatalf("a block begun after the lift: %+v, want %+v", got, after)
		}
		if _, err := s.Get(ctx, store.Key{Workspace: ws, Namespace: "ns", Identifier: "Alice"}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another identifier's box: %v, want ErrNotFound", err)
		}
	})
	t.Run("ListPagesTheBlocksInForce", func(t *testing.T) {
		s, ws := newStore(t), workspace()
		t0 := now()
		for _, id := range []string{"c", "a", "b", "d"} {
			until := t0 + 60_000
			if id == "d" {
				until = t0 - 1 // ended
			}
			if err := s.Merge(ctx, store.Block{Key: store.Key{Workspace: ws, Namespace: "ns", Identifier: id}, Start: t0 - 2_000, Until: until}); err != nil {
				t.Fatal(err)
			}
		}
		page, err := s.List(ctx, ws, "ns", "", t0, 2)
		if err != nil || len(page) != 2 || page[0].Identifier != "a" || page[1].Identifier != "b" {
			t.Fatalf("first page: %+v, %v", page, err)
		}
		page, err = s.List(ctx, ws, "ns", "b", t0, 2)
		if err != nil || len(page) != 1 || page[0].Identifier != "c" {
			t.Fatalf("second page: %+v, %v; want c alone (d's block ended)", page, err)
		}
		if page, _ := s.List(ctx, ws, "other", "", t0, 10); len(page) != 0 {
			t.Fatalf("another namespace: %+v", page)
		}
	})
	t.Run("ChangesSinceAClock", func(t *testing.T) {
		s, ws := newStore(t), workspace()
		t0 := now()
		old := store.Block{Key: store.Key{Workspace: ws, Namespace: "ns", Identifier: "old"}, Start: t0, Until: t0 + 60_000}
		if err := s.Merge(ctx, old); err != nil {
			t.Fatal(err)
		}
		all, clock, err := s.Changes(ctx, 0, t0, 100)
		if err != nil || !holds(all, old) || clock <= 0 {
			t.Fatalf("changes from 0: %+v, clock %d, %v; want %+v among them", all, clock, err, old)
		}
		fresh := store.Block{Key: store.Key{Workspace: ws, Namespace: "ns", Identifier: "fresh"}, Start: t0, Until: t0 + 60_000}
		if err := s.Merge(ctx, fresh); err != nil {
			t.Fatal(err)
		}
		got, _, err := s.Changes(ctx, clock, t0, 100)
		if err != nil || !holds(got, fresh) {
			t.Fatalf("changes since %d: %+v, %v; want %+v", clock, got, err, fresh)
		}
		if got, _, _ := s.Changes(ctx, 0, t0+120_000, 100); holds(got, fresh) || holds(got, old) {
			t.Fatalf("changes that matter after both expired: %+v", got)
		}
		if got, _, _ := s.Changes(ctx, 0, t0, 1); len(got) != 1 || got[0] != fresh {
			t.Fatalf("one change from 0: %+v, want the latest written, %+v", got, fresh)
		}
	})
}

// holds reports whether bs holds b.
func holds(bs []store.Block, b store.Block) bool {
	for _, x := range bs {
		if x == b {
			return true
		}
	}
	return false
}

// workspace returns a workspace no other subtest uses.
func workspace() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ws_" + hex.EncodeToString(b)
}

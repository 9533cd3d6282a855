// Package storetest has the contract suite every keys store runs
// ([TestStore]: memstore's and, on a real MariaDB, mysqlstore's) and
// [Faulty], which wraps any store with an outage a test switches on, as
// pebble's errorfs wraps any file system.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/keys"
	"github.com/unkeyed/ratelimit/services/keys/store"
)

// ErrDown is every call of a Faulty store that is down.
var ErrDown = errors.New("storetest: store down")

// Faulty wraps a store.Store with an outage: while down, every call fails
// with ErrDown and reaches nothing.
type Faulty struct {
	store.Store
	down atomic.Bool
}

// NewFaulty returns inner, up.
func NewFaulty(inner store.Store) *Faulty { return &Faulty{Store: inner} }

// SetDown switches the outage on or off.
func (f *Faulty) SetDown(down bool) { f.down.Store(down) }

func (f *Faulty) fail() error {
	if f.down.Load() {
		return ErrDown
	}
	return nil
}

// Summary implements store.Store.
func (f *Faulty) Summary(ctx context.Context) (store.Summary, error) {
	if err := f.fail(); err != nil {
		return store.Summary{}, err
	}
	return f.Store.Summary(ctx)
}

// All implements store.Store.
func (f *Faulty) All(ctx context.Context) ([]store.Key, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.Store.All(ctx)
}

// Create implements store.Store.
func (f *Faulty) Create(ctx context.Context, k store.Key) (store.Key, error) {
	if err := f.fail(); err != nil {
		return store.Key{}, err
	}
	return f.Store.Create(ctx, k)
}

// TestStore runs the contract of store.Store against the stores newStore
// returns, each empty.
func TestStore(t *testing.T, newStore func(t *testing.T) store.Store) {
	ctx := context.Background()
	newKey := func(ws, name string, perms ...string) store.Key {
		_, d := keys.Generate()
		return store.Key{ID: keys.NewID(), Workspace: ws, Name: name, Digest: d, Permissions: perms}
	}

	t.Run("CreateGetRevoke", func(t *testing.T) {
		s := newStore(t)
		expires := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		k := newKey("ws", "gateway", "ratelimit.*.limit", "ratelimit.api.set_override")
		k.ExpiresAt = expires
		got, err := s.Create(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != k.ID || got.Digest != k.Digest || !slices.Equal(got.Permissions, k.Permissions) ||
			!got.ExpiresAt.Equal(expires) || got.CreatedAt.IsZero() || !got.RevokedAt.IsZero() {
			t.Fatalf("created %+v from %+v", got, k)
		}
		if _, err := s.Get(ctx, "other", k.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another workspace got the key: %v", err)
		}
		if _, err := s.Create(ctx, newKey("ws", "again")); err != nil {
			t.Fatal(err)
		}
		dup := newKey("ws", "dup")
		dup.Digest = k.Digest
		if _, err := s.Create(ctx, dup); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("a second key with the same digest: %v, want ErrDuplicate", err)
		}
		if total, live, err := s.Count(ctx, "ws"); err != nil || total != 2 || live != 2 {
			t.Fatalf("Count = %d, %d, %v; want 2, 2", total, live, err)
		}
		revoked, err := s.Revoke(ctx, "ws", k.ID)
		if err != nil || revoked.RevokedAt.IsZero() {
			t.Fatalf("Revoke = %+v, %v", revoked, err)
		}
		if _, err := s.Revoke(ctx, "ws", k.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("revoking twice: %v, want ErrNotFound", err)
		}
		if _, err := s.SetPermissions(ctx, "ws", k.ID, []string{"audit.read"}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("changing a revoked key: %v, want ErrNotFound", err)
		}
		if total, live, _ := s.Count(ctx, "ws"); total != 2 || live != 1 {
			t.Fatalf("Count after a revocation = %d, %d; want 2, 1", total, live)
		}
		if got, err := s.Get(ctx, "ws", k.ID); err != nil || got.RevokedAt.IsZero() {
			t.Fatalf("a revoked key is kept, marked: %+v, %v", got, err)
		}
	})

	t.Run("SummaryChangesWithEveryChange", func(t *testing.T) {
		s := newStore(t)
		seen := map[store.Summary]string{}
		note := func(what string) {
			t.Helper()
			sum, err := s.Summary(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if prev, ok := seen[sum]; ok {
				t.Fatalf("the summary after %s equals the one after %s: %+v", what, prev, sum)
			}
			seen[sum] = what
		}
		note("nothing")
		k, err := s.Create(ctx, newKey("ws", "a", "ratelimit.*.limit"))
		if err != nil {
			t.Fatal(err)
		}
		note("a creation")
		for i := range 3 {
			if _, err := s.SetPermissions(ctx, "ws", k.ID, []string{fmt.Sprintf("ratelimit.ns%d.limit", i)}); err != nil {
				t.Fatal(err)
			}
			note(fmt.Sprintf("change %d", i))
		}
		if _, err := s.Revoke(ctx, "ws", k.ID); err != nil {
			t.Fatal(err)
		}
		note("a revocation")
		all, err := s.All(ctx)
		if err != nil || len(all) != 1 || all[0].RevokedAt.IsZero() || !slices.Equal(all[0].Permissions, []string{"ratelimit.ns2.limit"}) {
			t.Fatalf("All = %+v, %v", all, err)
		}
	})

	t.Run("Changes", func(t *testing.T) {
		s := newStore(t)
		a, err := s.Create(ctx, newKey("ws", "a", "audit.read"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Create(ctx, newKey("ws", "b", "audit.read"))
		if err != nil {
			t.Fatal(err)
		}
		if b.Revision <= 0 || a.Revision <= 0 {
			t.Fatalf("revisions %d, %d", a.Revision, b.Revision)
		}
		revoked, err := s.Revoke(ctx, "ws", a.ID)
		if err != nil || revoked.Revision <= a.Revision {
			t.Fatalf("a revocation's revision %d after %d: %v", revoked.Revision, a.Revision, err)
		}
		changed, err := s.Changes(ctx, b.Revision+1)
		if err != nil || len(changed) != 1 || changed[0].ID != a.ID || changed[0].RevokedAt.IsZero() {
			t.Fatalf("Changes since after b: %+v, %v; want a, revoked", changed, err)
		}
		if all, err := s.Changes(ctx, 0); err != nil || len(all) != 2 {
			t.Fatalf("Changes since 0: %d keys, %v; want 2", len(all), err)
		}
	})

	t.Run("ListPages", func(t *testing.T) {
		s := newStore(t)
		var ids []string
		for i := range 5 {
			k, err := s.Create(ctx, newKey("ws", fmt.Sprint("k", i), "audit.read"))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, k.ID)
		}
		if _, err := s.Create(ctx, newKey("other", "x", "audit.read")); err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		var got []string
		after := ""
		for {
			page, err := s.List(ctx, "ws", after, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range page {
				got = append(got, k.ID)
			}
			if len(page) < 2 {
				break
			}
			after = page[len(page)-1].ID
		}
		if !slices.Equal(got, ids) {
			t.Fatalf("pages listed %v, want %v", got, ids)
		}
	})
}

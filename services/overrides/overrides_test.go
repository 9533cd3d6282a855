package overrides

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/services/overrides/mysqlstore"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"user_*", "user_42", true},
		{"user_*", "user_", true},
		{"user_*", "use", false},
		{"*_42", "bot_42", true},
		{"*_42", "bot_421", false},
		{"a*b*c", "a-x-b-y-c", true},
		{"a*b*c", "a-x-c-y-b", false},
		{"*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
		{"**", "", true},
		{"x", "x", true},
		{"x", "xx", false},
	} {
		if got := match(tc.pattern, tc.s); got != tc.want {
			t.Errorf("match(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func newRegistry(t testing.TB, opts ...Option) *Registry {
	t.Helper()
	s, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func set(t *testing.T, s *Registry, ns, id string, limit int64) Override {
	t.Helper()
	o, err := s.Set(context.Background(), Override{Workspace: "ws", Namespace: ns, Identifier: id, Limit: limit, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestMostSpecificWins checks the documented examples: an exact override
// first, then the pattern with the most literal bytes, then fewer *, then
// byte order.
func TestMostSpecificWins(t *testing.T) {
	s := newRegistry(t)
	set(t, s, "ns", "user_*", 1)
	set(t, s, "ns", "user_4*", 2)
	set(t, s, "ns", "*_42", 3)
	set(t, s, "ns", "*_4*", 4) // 3 literal bytes, two *: loses to "*_42"
	set(t, s, "ns", "user_9", 5)
	for id, want := range map[string]int64{"user_42": 2, "user_7": 1, "bot_42": 3, "bot_43": 4, "user_9": 5} {
		o, ok := s.Lookup("ws", "ns", id)
		if !ok || o.Limit != want {
			t.Errorf("Lookup(%q) = %+v, %v; want the override with limit %d", id, o, ok, want)
		}
	}
	if _, ok := s.Lookup("ws", "ns", "nobody"); ok {
		t.Error("an identifier no override matches got one")
	}
	if _, ok := s.Lookup("other", "ns", "user_9"); ok {
		t.Error("another workspace's override applied")
	}
	// Ties on literal bytes and * are broken by byte order.
	set(t, s, "tie", "a*", 1)
	set(t, s, "tie", "*b", 2)
	if o, _ := s.Lookup("ws", "tie", "ab"); o.Limit != 2 {
		t.Errorf("tie: limit %d, want 2 (\"*b\" sorts before \"a*\")", o.Limit)
	}
}

func TestValidation(t *testing.T) {
	s := newRegistry(t)
	for _, tc := range []struct {
		o     Override
		field string
	}{
		{Override{Namespace: "", Identifier: "x", Limit: 1, Duration: time.Second}, "namespace"},
		{Override{Namespace: "ns", Identifier: "", Limit: 1, Duration: time.Second}, "identifier"},
		{Override{Namespace: "ns", Identifier: "**", Limit: 1, Duration: time.Second}, "identifier"},
		{Override{Namespace: "ns", Identifier: "x", Limit: -1, Duration: time.Second}, "limit"},
		{Override{Namespace: "ns", Identifier: "x", Limit: 1, Duration: time.Millisecond}, "duration"},
		{Override{Namespace: "ns", Identifier: "*", Limit: 1, Duration: time.Second}, "identifier"},
		{Override{Namespace: "ns", Identifier: "*", Limit: 1, Duration: time.Second, Shadow: true}, "identifier"},
		{Override{Namespace: "ns", Identifier: "x"}, "duration"},
		{Override{Namespace: "ns", Identifier: "x", Limit: 5, Shadow: true}, "duration"},
		{Override{Namespace: "ns", Identifier: "*", Burst: 5, Shadow: true}, "duration"},
		{Override{Namespace: "", Identifier: "*", Shadow: true}, "namespace"},
		{Override{Namespace: "ns", Identifier: "***", Shadow: true}, "identifier"},
	} {
		_, err := s.Set(context.Background(), tc.o)
		var ve *invalid.Error
		if !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("Set(%+v) = %v, want a validation error on %s", tc.o, err, tc.field)
		}
	}
	if _, _, err := s.List(context.Background(), "ws", "ns", "", 101); err == nil {
		t.Error("a page of 101 was accepted")
	}
}

// exercise runs the same checks on a registry with or without a store.
func exercise(t *testing.T, s *Registry) {
	ctx := context.Background()
	first := set(t, s, "ns", "alice", 10)
	again := set(t, s, "ns", "alice", 20)
	if again.ID != first.ID || again.Limit != 20 {
		t.Fatalf("setting again: %+v, want the same id %s with limit 20", again, first.ID)
	}
	if got, err := s.Get(ctx, "ws", "ns", "alice"); err != nil || got.Limit != 20 || got.ID != first.ID {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	for i := range 25 {
		set(t, s, "page", fmt.Sprintf("id%02d", i), int64(i+1))
	}
	var seen []string
	after := ""
	for {
		page, more, err := s.List(ctx, "ws", "page", after, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page {
			seen = append(seen, o.Identifier)
		}
		if !more {
			break
		}
		after = page[len(page)-1].Identifier
	}
	if len(seen) != 25 || !slices.IsSorted(seen) {
		t.Fatalf("paged through %d overrides %v, want 25 in order", len(seen), seen)
	}
	if err := s.Delete(ctx, "ws", "ns", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup("ws", "ns", "alice"); ok {
		t.Fatal("a deleted override still applies")
	}
	if _, err := s.Get(ctx, "ws", "ns", "alice"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "ws", "ns", "alice"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete = %v, want ErrNotFound", err)
	}
	revived := set(t, s, "ns", "alice", 30)
	if o, ok := s.Lookup("ws", "ns", "alice"); !ok || o.Limit != 30 || o.ID != revived.ID {
		t.Fatalf("revived override: %+v, %v", o, ok)
	}
}

func TestInMemory(t *testing.T) { exercise(t, newRegistry(t)) }

// TestNamespaceSwitch: a shadow override of "*" alone is a namespace's
// switch, found by Switch and by no identifier's Lookup (but the
// identifier "*" itself); it leaves the other overrides as they are, and
// goes when deleted.
func TestNamespaceSwitch(t *testing.T) {
	ctx := context.Background()
	s := newRegistry(t)
	set(t, s, "ns", "alice", 10)
	if _, ok := s.Switch("ws", "ns"); ok {
		t.Fatal("a switch before one is set")
	}
	sw, err := s.Set(ctx, Override{Workspace: "ws", Namespace: "ns", Identifier: NamespaceSwitch, Shadow: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Switch("ws", "ns"); !ok || got.ID != sw.ID || !got.KeepsLimit() {
		t.Fatalf("Switch = %+v, %v", got, ok)
	}
	if _, ok := s.Switch("ws", "other"); ok {
		t.Fatal("the switch of ns applies to another namespace")
	}
	if _, ok := s.Lookup("ws", "ns", "bob"); ok {
		t.Fatal("the switch is an override of bob: it must be no pattern")
	}
	if o, ok := s.Lookup("ws", "ns", "alice"); !ok || o.Limit != 10 || o.Shadow {
		t.Fatalf("alice's override under the switch: %+v, %v", o, ok)
	}
	if err := s.Delete(ctx, "ws", "ns", NamespaceSwitch); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Switch("ws", "ns"); ok {
		t.Fatal("a deleted switch still applies")
	}
}

// TestMySQLStoreAcrossProcesses runs two services on one real MariaDB:
// what one sets or deletes reaches the other at its next poll, and a new
// process (a restart) loads everything on its first.
func TestMySQLStoreAcrossProcesses(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	a := newRegistry(t, WithStore(mysqlstore.New(sqlDB)))
	b := newRegistry(t, WithStore(mysqlstore.New(sqlDB)))
	exercise(t, a)
	ctx := context.Background()
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if o, ok := b.Lookup("ws", "ns", "alice"); !ok || o.Limit != 30 {
		t.Fatalf("b after its poll: %+v, %v; want limit 30", o, ok)
	}
	set(t, b, "ns", "bob*", 7)
	if err := a.Delete(ctx, "ws", "page", "id03"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Registry{a, b} {
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if o, ok := a.Lookup("ws", "ns", "bobby"); !ok || o.Limit != 7 {
		t.Fatalf("a after b set a pattern: %+v, %v", o, ok)
	}
	if _, ok := b.Lookup("ws", "page", "id03"); ok {
		t.Fatal("b still applies an override a deleted")
	}
	restarted := newRegistry(t, WithStore(mysqlstore.New(sqlDB)))
	if err := restarted.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if o, ok := restarted.Lookup("ws", "page", "id24"); !ok || o.Limit != 25 {
		t.Fatalf("a restarted process: %+v, %v; want every override loaded", o, ok)
	}
	if _, ok := restarted.Lookup("ws", "page", "id03"); ok {
		t.Fatal("a restarted process applies a deleted override")
	}
}

package keys_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/audit"
	auditmem "github.com/unkeyed/ratelimit/services/audit/memstore"
	auditstore "github.com/unkeyed/ratelimit/services/audit/store"
	"github.com/unkeyed/ratelimit/services/keys"
	keysmem "github.com/unkeyed/ratelimit/services/keys/memstore"
)

// actingAs returns the actor of a key of ws with perms.
func actingAs(t *testing.T, ws, keyID string, perms ...string) keys.Actor {
	t.Helper()
	p, err := access.Parse(perms)
	if err != nil {
		t.Fatal(err)
	}
	return keys.Actor{Principal: access.Principal{Workspace: ws, Permissions: p, KeyID: keyID}, RequestID: "req_test"}
}

func newManager(t *testing.T) (*keys.Manager, *keysmem.Store, *auditmem.Store) {
	t.Helper()
	store, log := keysmem.New(), auditmem.New(100)
	// The rate of changes is the daemon's test's (TestAuditKeepsChangesAtABoundedRate);
	// these tests make thousands at once.
	w, err := audit.NewWriter(log, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), audit.WithChangesPerSecond(1e5))
	if err != nil {
		t.Fatal(err)
	}
	return keys.NewManager(store, w), store, log
}

// TestManagerPermissions: every call needs keys.manage, a key gives only
// what its holder holds, and a refusal changes nothing.
func TestManagerPermissions(t *testing.T) {
	m, store, log := newManager(t)
	var de *access.DeniedError
	reader := actingAs(t, "ws", "key_reader", "audit.read")
	if _, _, err := m.Create(context.Background(), reader, "x", []string{"audit.read"}, time.Time{}); !errors.As(err, &de) || de.Permission != "keys.manage" {
		t.Fatalf("Create without keys.manage: %v", err)
	}
	if _, _, err := m.List(context.Background(), reader, "", 0); !errors.As(err, &de) || de.Permission != "keys.manage" {
		t.Fatalf("List without keys.manage: %v", err)
	}
	narrow := actingAs(t, "ws", "key_admin", "keys.manage", "ratelimit.api.limit")
	if _, _, err := m.Create(context.Background(), narrow, "x", []string{"ratelimit.*.limit"}, time.Time{}); !errors.As(err, &de) || de.Permission != "ratelimit.*.limit" {
		t.Fatalf("granting more than held: %v", err)
	}
	if _, _, err := m.Create(context.Background(), narrow, "x", []string{"ratelimit.api.set_override"}, time.Time{}); !errors.As(err, &de) || de.Permission != "ratelimit.api.set_override" {
		t.Fatalf("granting another action: %v", err)
	}
	if all, _ := store.All(context.Background()); len(all) != 0 {
		t.Fatalf("refused creations stored %d keys", len(all))
	}
	if entries, _ := log.List(context.Background(), "ws", auditstore.Filter{}, 0, 10); len(entries) != 0 {
		t.Fatalf("refused creations were audited: %+v", entries)
	}
	k, secret, err := m.Create(context.Background(), narrow, "gateway", []string{"ratelimit.api.limit"}, time.Time{})
	if err != nil || !strings.HasPrefix(secret, keys.SecretPrefix) || k.Digest != keys.DigestOf(secret) {
		t.Fatalf("Create within what is held: %+v, %v", k, err)
	}
	// A narrower manager can neither demote nor revoke a broader key.
	broad, _, err := m.Create(context.Background(), actingAs(t, "ws", "key_root", "keys.manage", "ratelimit.*.limit"), "broad",
		[]string{"keys.manage", "ratelimit.*.limit"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Update(context.Background(), narrow, broad.ID, []string{"ratelimit.api.limit"}); !errors.As(err, &de) || de.Permission != "ratelimit.*.limit" {
		t.Fatalf("demoting a broader key: %v", err)
	}
	if _, err := m.Revoke(context.Background(), narrow, broad.ID); !errors.As(err, &de) {
		t.Fatalf("revoking a broader key: %v", err)
	}
	if got, _ := store.Get(context.Background(), "ws", broad.ID); !got.RevokedAt.IsZero() || len(got.Permissions) != 2 {
		t.Fatalf("the broader key was changed: %+v", got)
	}
	if _, err := m.Revoke(context.Background(), narrow, k.ID); err != nil {
		t.Fatalf("revoking a key within what is held: %v", err)
	}
	// Another workspace's key manager cannot see or touch it.
	other := actingAs(t, "other", "key_o", "keys.manage", "ratelimit.*.limit")
	if _, err := m.Revoke(context.Background(), other, k.ID); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("revoking another workspace's key: %v, want ErrNotFound", err)
	}
	if page, _, err := m.List(context.Background(), other, "", 0); err != nil || len(page) != 0 {
		t.Fatalf("another workspace lists %d keys, %v", len(page), err)
	}
}

// TestManagerValidates: bad input names the field and changes nothing.
func TestManagerValidates(t *testing.T) {
	m, store, _ := newManager(t)
	admin := actingAs(t, "ws", "key_admin", "keys.manage", "ratelimit.*.limit")
	for _, tc := range []struct {
		name    string
		perms   []string
		expires time.Time
		field   string
	}{
		{"", []string{"ratelimit.*.limit"}, time.Time{}, "name"},
		{"x\x00", []string{"ratelimit.*.limit"}, time.Time{}, "name"},
		{"x", nil, time.Time{}, "permissions"},
		{"x", []string{"ratelimit.*.everything"}, time.Time{}, "permissions"},
		{"x", []string{"ratelimit.*.limit"}, time.Now().Add(-time.Second), "expires_at"},
	} {
		var ve *invalid.Error
		if _, _, err := m.Create(context.Background(), admin, tc.name, tc.perms, tc.expires); !errors.As(err, &ve) || ve.Field != tc.field {
			t.Fatalf("Create(%q, %v, %v): %v, want a validation error of %s", tc.name, tc.perms, tc.expires, err, tc.field)
		}
	}
	if all, _ := store.All(context.Background()); len(all) != 0 {
		t.Fatalf("refused creations stored %d keys", len(all))
	}
}

// TestManagerAudits: each change is recorded with its actor, request id,
// and values before and after, and never a secret or digest.
func TestManagerAudits(t *testing.T) {
	m, _, log := newManager(t)
	admin := actingAs(t, "ws", "key_admin", "keys.manage", "ratelimit.*.limit", "audit.read")
	k, secret, err := m.Create(context.Background(), admin, "gateway", []string{"ratelimit.*.limit"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Update(context.Background(), admin, k.ID, []string{"ratelimit.*.limit", "audit.read"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Revoke(context.Background(), admin, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Update(context.Background(), admin, k.ID, []string{"audit.read"}); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("changing a revoked key: %v", err)
	}
	entries, err := log.List(context.Background(), "ws", auditstore.Filter{Target: k.ID}, 0, 10)
	if err != nil || len(entries) != 3 {
		t.Fatalf("entries %+v, %v; want 3", entries, err)
	}
	for i, want := range []string{audit.KeyRevoke, audit.KeyUpdate, audit.KeyCreate} {
		e := entries[i]
		if e.Action != want || e.Actor != "key_admin" || e.RequestID != "req_test" || e.Workspace != "ws" {
			t.Fatalf("entry %d: %+v, want %s by key_admin", i, e, want)
		}
		d := keys.DigestOf(secret)
		for _, v := range []string{e.Before, e.After} {
			if strings.Contains(v, secret) || strings.Contains(v, d.String()[7:]) || strings.Contains(v, "digest") {
				t.Fatalf("entry %d shows the key or its digest: %s", i, v)
			}
		}
	}
	if entries[2].Before != "" || !strings.Contains(entries[2].After, `"gateway"`) {
		t.Fatalf("creation entry: %+v", entries[2])
	}
	if !strings.Contains(entries[1].Before, `["ratelimit.*.limit"]`) || !strings.Contains(entries[1].After, "audit.read") {
		t.Fatalf("update entry: %+v", entries[1])
	}
	if !strings.Contains(entries[0].After, "revokedAt") {
		t.Fatalf("revocation entry: %+v", entries[0])
	}
}

// TestManagerCap: a workspace holds at most MaxLivePerWorkspace live keys;
// revoking one makes room.
func TestManagerCap(t *testing.T) {
	m, _, _ := newManager(t)
	admin := actingAs(t, "ws", "key_admin", "keys.manage", "audit.read")
	var last keys.Key
	for range keys.MaxLivePerWorkspace {
		k, _, err := m.Create(context.Background(), admin, "k", []string{"audit.read"}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		last = k
	}
	var ce *keys.CapacityError
	if _, _, err := m.Create(context.Background(), admin, "k", []string{"audit.read"}, time.Time{}); !errors.As(err, &ce) {
		t.Fatalf("a key past the cap: %v", err)
	}
	if !ce.Exhausted() {
		t.Fatal("the cap does not say it is a resource exhausted")
	}
	if _, err := m.Revoke(context.Background(), admin, last.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Create(context.Background(), admin, "k", []string{"audit.read"}, time.Time{}); err != nil {
		t.Fatalf("a key after a revocation made room: %v", err)
	}
}

// TestManagerClosesEscalations: what a hostile review found, each refused:
// a permission holding white space (which the MySQL store wrote space-
// separated and read back as several: ratelimit.*.limit smuggled
// audit.read and ratelimit.*.set_override in a namespace's name); the open
// server's callers minting the first key; an expiring key minting one that
// never expires.
func TestManagerClosesEscalations(t *testing.T) {
	m, store, _ := newManager(t)
	mgr := actingAs(t, "acme", "key_mgr", "keys.manage", "ratelimit.*.limit")
	var ve *invalid.Error
	smuggled := "ratelimit.y.set_override audit.read ratelimit.*.set_override ratelimit.z.limit"
	if _, _, err := m.Create(context.Background(), mgr, "smuggle", []string{smuggled}, time.Time{}); !errors.As(err, &ve) || ve.Field != "permissions" ||
		!strings.Contains(ve.Rule, "white space") {
		t.Fatalf("a permission with spaces: %v", err)
	}
	if _, _, err := m.Create(context.Background(), mgr, "tab", []string{"ratelimit.a\tb.limit"}, time.Time{}); !errors.As(err, &ve) {
		t.Fatalf("a permission with a tab: %v", err)
	}

	open := keys.Actor{Principal: access.OpenPrincipal()}
	var de *access.DeniedError
	if _, _, err := m.Create(context.Background(), open, "attacker", []string{"keys.manage"}, time.Time{}); !errors.As(err, &de) ||
		!strings.Contains(err.Error(), "api keys create") {
		t.Fatalf("the open server's caller creating a key: %v", err)
	}
	if all, _ := store.All(context.Background()); len(all) != 0 {
		t.Fatalf("refused creations stored %d keys", len(all))
	}

	ends := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	p, _ := access.Parse([]string{"keys.manage", "ratelimit.*.limit"})
	temp := keys.Actor{Principal: access.Principal{Workspace: "acme", Permissions: p, KeyID: "key_temp", ExpiresAt: ends}}
	for _, asked := range []time.Time{{}, ends.Add(24 * time.Hour)} {
		k, _, err := m.Create(context.Background(), temp, "persist", []string{"ratelimit.*.limit"}, asked)
		if err != nil || !k.ExpiresAt.Equal(ends) {
			t.Fatalf("a key made by one that expires at %v, asked %v: expires %v, %v", ends, asked, k.ExpiresAt, err)
		}
	}
	sooner := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
	shortLived, _, err := m.Create(context.Background(), temp, "sooner", []string{"ratelimit.a.limit"}, sooner)
	if err != nil || !shortLived.ExpiresAt.Equal(sooner) {
		t.Fatalf("a sooner expiry: %v, %v", shortLived.ExpiresAt, err)
	}

	// UpdateKey: before, the expiring key widened a key that never expires
	// to every permission it held, which outlived it.
	admin := actingAs(t, "acme", "key_admin", "keys.manage", "ratelimit.*.limit")
	permanent, _, err := m.Create(context.Background(), admin, "permanent", []string{"ratelimit.a.limit", "ratelimit.b.limit"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Update(context.Background(), temp, permanent.ID, []string{"keys.manage", "ratelimit.*.limit"}); !errors.As(err, &de) ||
		!strings.Contains(err.Error(), "outlives it") {
		t.Fatalf("an expiring key widening a permanent one: %v, want permission_denied", err)
	}
	if k, _ := store.Get(context.Background(), "acme", permanent.ID); len(k.Permissions) != 2 {
		t.Fatalf("a refused update changed the key: %v", k.Permissions)
	}
	// Narrowing a key that outlives it, and widening one that expires
	// first, are allowed.
	if k, err := m.Update(context.Background(), temp, permanent.ID, []string{"ratelimit.a.limit"}); err != nil || len(k.Permissions) != 1 {
		t.Fatalf("an expiring key narrowing a permanent one: %v, %v", k.Permissions, err)
	}
	if k, err := m.Update(context.Background(), temp, shortLived.ID, []string{"ratelimit.*.limit"}); err != nil || k.Permissions[0] != "ratelimit.*.limit" {
		t.Fatalf("an expiring key widening one that expires first: %v, %v", k.Permissions, err)
	}
}

package keys_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/keys"
	keysmem "github.com/unkeyed/ratelimit/services/keys/memstore"
	"github.com/unkeyed/ratelimit/services/keys/storetest"
)

// TestRingOpen: the API is open only while no source holds a key; a keys
// table that was never read keeps it closed and answers unavailable.
func TestRingOpen(t *testing.T) {
	if !keys.NewRing().Open() {
		t.Fatal("a ring without sources is not open")
	}
	tokens, _ := access.ParseTokens("tok_0123456789abcdef=ws")
	if keys.NewRing(keys.WithTokens(tokens)).Open() {
		t.Fatal("a ring with tokens is open")
	}

	store := storetest.NewFaulty(keysmem.New())
	ring := keys.NewRing()
	table, err := keys.NewTable(store, ring, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if ring.Open() {
		t.Fatal("a ring whose table was never read is open")
	}
	if _, err := ring.Principal("anything-at-all-12345"); !errors.Is(err, access.ErrKeysNotLoaded) {
		t.Fatalf("before the table is read: %v, want ErrKeysNotLoaded", err)
	}
	store.SetDown(true)
	if err := table.Load(context.Background()); err == nil {
		t.Fatal("a load from a store that is down succeeded")
	}
	if ring.Open() {
		t.Fatal("a failed load opened the API")
	}
	store.SetDown(false)
	if err := table.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !ring.Open() {
		t.Fatal("an empty table keeps the API closed")
	}
	// A key, even revoked, closes it for good.
	_, d := keys.Generate()
	k, _ := store.Create(context.Background(), keys.Key{ID: "key_1", Workspace: "ws", Name: "n", Digest: d, Permissions: []string{"audit.read"}})
	store.Revoke(context.Background(), "ws", k.ID)
	table.Load(context.Background())
	if ring.Open() {
		t.Fatal("a table holding a revoked key leaves the API open")
	}
}

// TestRingLookup: each source is found, a revoked key is unknown, an
// expired one says so, and the table's keys outlive a store outage.
func TestRingLookup(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tokens, _ := access.ParseTokens("tok_0123456789abcdef=ws_static")
	ring := keys.NewRing(keys.WithTokens(tokens), keys.WithClock(func() time.Time { return now }))
	store := storetest.NewFaulty(keysmem.New())
	table, err := keys.NewTable(store, ring, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	limitOnly, d1 := keys.Generate()
	expiring, d2 := keys.Generate()
	revoked, d3 := keys.Generate()
	for _, k := range []keys.Key{
		{ID: "key_limit", Workspace: "ws", Name: "gw", Digest: d1, Permissions: []string{"ratelimit.api.limit"}},
		{ID: "key_exp", Workspace: "ws", Name: "tmp", Digest: d2, Permissions: []string{"audit.read"}, ExpiresAt: now.Add(time.Minute)},
		{ID: "key_rev", Workspace: "ws", Name: "old", Digest: d3, Permissions: []string{"audit.read"}},
	} {
		if _, err := store.Create(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	store.Revoke(ctx, "ws", "key_rev")
	if err := table.Load(ctx); err != nil {
		t.Fatal(err)
	}
	pr, err := ring.Principal(limitOnly)
	if err != nil || pr.Workspace != "ws" || pr.KeyID != "key_limit" ||
		!pr.Permissions.Allows(access.Limit, "api") || pr.Permissions.Allows(access.SetOverride, "api") {
		t.Fatalf("limit-only key: %+v, %v", pr, err)
	}
	if pr, err := ring.Principal("tok_0123456789abcdef"); err != nil || pr.Workspace != "ws_static" {
		t.Fatalf("static token: %+v, %v", pr, err)
	}
	if _, err := ring.Principal(revoked); !errors.Is(err, access.ErrUnknownToken) {
		t.Fatalf("revoked key: %v, want ErrUnknownToken", err)
	}
	if _, err := ring.Principal(expiring); err != nil {
		t.Fatalf("a key before its expiry: %v", err)
	}
	now = now.Add(time.Minute)
	if _, err := ring.Principal(expiring); !errors.Is(err, access.ErrExpiredToken) {
		t.Fatalf("a key at its expiry: %v, want ErrExpiredToken", err)
	}

	// MySQL down: the keys last read stay in force.
	store.SetDown(true)
	if err := table.Load(ctx); err == nil {
		t.Fatal("a poll of a store that is down succeeded")
	}
	if _, err := ring.Principal(limitOnly); err != nil {
		t.Fatalf("a key known before the outage is refused during it: %v", err)
	}
}

// TestKeysFile: a file's keys are in force from the start; a replaced file
// (as the kubelet swaps a Secret's link) is in force at the next read,
// and one that does not parse leaves the keys last read.
func TestKeysFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.json")
	first, d1 := keys.Generate()
	second, d2 := keys.Generate()
	write := func(body string) {
		t.Helper()
		tmp := filepath.Join(dir, "tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(id string, d keys.Digest, perms string) string {
		return `{"id":"` + id + `","name":"n","workspace":"ws","digest":"` + d.String() + `","permissions":[` + perms + `]}`
	}
	write(`{"keys":[` + entry("key_1", d1, `"ratelimit.*.limit"`) + `]}`)
	ring := keys.NewRing()
	f, err := keys.NewFile(path, ring)
	if err != nil {
		t.Fatal(err)
	}
	if ring.Open() {
		t.Fatal("a ring with a keys file is open")
	}
	if pr, err := ring.Principal(first); err != nil || pr.KeyID != "key_1" {
		t.Fatalf("the file's key: %+v, %v", pr, err)
	}
	if f.Reload() {
		t.Fatal("an unchanged file was reloaded")
	}
	write(`{"keys":[` + entry("key_2", d2, `"ratelimit.*.limit","audit.read"`) + `]}`)
	if !f.Reload() {
		t.Fatal("a replaced file was not reloaded")
	}
	if _, err := ring.Principal(first); !errors.Is(err, access.ErrUnknownToken) {
		t.Fatalf("a key removed from the file: %v, want ErrUnknownToken", err)
	}
	if pr, err := ring.Principal(second); err != nil || !pr.Permissions.Has(access.ReadAudit) {
		t.Fatalf("the new key: %+v, %v", pr, err)
	}
	write(`{"keys":[` + entry("key_3", d1, `"ratelimit.*.lim"`) + `]}`)
	if f.Reload() {
		t.Fatal("a broken file was put in force")
	}
	if _, err := ring.Principal(second); err != nil {
		t.Fatalf("a broken file dropped the keys last read: %v", err)
	}
	if _, err := keys.NewFile(path, keys.NewRing()); err == nil || !strings.Contains(err.Error(), "keys[0]") {
		t.Fatalf("a broken file at start: %v, want an error naming keys[0]", err)
	}
}

func TestParseFile(t *testing.T) {
	_, d := keys.Generate()
	good := `"id":"key_1","name":"n","workspace":"ws","digest":"` + d.String() + `"`
	for _, tc := range []struct{ body, want string }{
		{`{"keys":[{` + good + `,"permissions":["audit.read"],"expiresAt":"2027-01-01T00:00:00Z"}]}`, ""},
		{`{"keys":[{` + good + `,"permissions":["audit.read"],"secret":"x"}]}`, "unknown"},
		{`{"keys":[{` + good + `,"permissions":[]}]}`, "keys[0]: permissions"},
		{`{"keys":[{"id":"key_1","name":"n","workspace":"ws","digest":"sha256:abc","permissions":["audit.read"]}]}`, "keys[0]: digest"},
		{`{"keys":[{"id":"key_1","name":"n","workspace":"","digest":"` + d.String() + `","permissions":["audit.read"]}]}`, "keys[0]: workspace"},
		{`{"keys":[{` + good + `,"permissions":["audit.read"]},{` + good + `,"permissions":["audit.read"]}]}`, "keys[1].id"},
		{`not json`, "not a keys file"},
	} {
		ks, err := keys.ParseFile([]byte(tc.body))
		if tc.want == "" {
			if err != nil || len(ks) != 1 || ks[0].ExpiresAt.IsZero() {
				t.Fatalf("%s: %+v, %v", tc.body, ks, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want an error with %q", tc.body, err, tc.want)
		}
	}
}

// TestKeysFileInASecretLayout: Kubernetes mounts a Secret's keys.json as a
// link into a ..data directory and swaps ..data on a rotation; a reload
// follows the swap.
func TestKeysFileInASecretLayout(t *testing.T) {
	dir := t.TempDir()
	first, d1 := keys.Generate()
	second, d2 := keys.Generate()
	for i, d := range []keys.Digest{d1, d2} {
		v := filepath.Join(dir, fmt.Sprint("..2026_11_25_v", i))
		os.Mkdir(v, 0o755)
		body := `{"keys":[{"id":"key_` + fmt.Sprint(i) + `","name":"n","workspace":"ws","digest":"` + d.String() +
			`","permissions":["ratelimit.*.limit"]}]}`
		if err := os.WriteFile(filepath.Join(v, "keys.json"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("..2026_11_25_v0", filepath.Join(dir, "..data"))
	os.Symlink(filepath.Join("..data", "keys.json"), filepath.Join(dir, "keys.json"))
	ring := keys.NewRing()
	f, err := keys.NewFile(filepath.Join(dir, "keys.json"), ring)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Principal(first); err != nil {
		t.Fatalf("the mounted key: %v", err)
	}
	// The kubelet's swap: a new link renamed over ..data.
	os.Symlink("..2026_11_25_v1", filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if !f.Reload() {
		t.Fatal("the swapped Secret was not reloaded")
	}
	if _, err := ring.Principal(second); err != nil {
		t.Fatalf("the rotated key: %v", err)
	}
	if _, err := ring.Principal(first); err == nil {
		t.Fatal("the key rotated out still works")
	}
}

package keys_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/keys"
	keysmem "github.com/unkeyed/ratelimit/services/keys/memstore"
)

// BenchmarkPrincipal is the cost every request pays to find its key: a
// Ring over tokens and a table of 1,000 keys, beside a bare Tokens map
// (what UNKEY_AUTH_TOKENS alone was before keys).
func BenchmarkPrincipal(b *testing.B) {
	tokens, _ := access.ParseTokens("tok_0123456789abcdef=ws")
	store := keysmem.New()
	ring := keys.NewRing(keys.WithTokens(tokens))
	table, err := keys.NewTable(store, ring, prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	var secret string
	for i := range 1000 {
		s, d := keys.Generate()
		store.Create(context.Background(), keys.Key{ID: fmt.Sprint("key_", i), Workspace: "ws", Name: "n", Digest: d,
			Permissions: []string{"ratelimit.*.limit"}})
		secret = s
	}
	if err := table.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Run("tokens", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tokens.Principal("tok_0123456789abcdef"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ring/table", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ring.Open() {
				b.Fatal("open")
			}
			if _, err := ring.Principal(secret); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package store_test

import (
	"context"
	"fmt"

	"github.com/unkeyed/ratelimit/services/keys"
	"github.com/unkeyed/ratelimit/services/keys/memstore"
	"github.com/unkeyed/ratelimit/services/keys/store"
)

// The keys' store contract on an in-memory store: a key is kept by its
// digest, never its secret; a revocation changes the summary every
// process polls, so each reads the keys again and refuses the revoked one.
func ExampleStore() {
	var s store.Store = memstore.New()
	ctx := context.Background()
	secret, digest := keys.Generate()
	k, _ := s.Create(ctx, store.Key{ID: keys.NewID(), Workspace: "acme", Name: "gateway", Digest: digest,
		Permissions: []string{"ratelimit.api.limit"}})
	fmt.Println("kept by its digest:", k.Digest == keys.DigestOf(secret))
	before, _ := s.Summary(ctx)
	revoked, _ := s.Revoke(ctx, "acme", k.ID)
	after, _ := s.Summary(ctx)
	fmt.Println("revoked:", !revoked.RevokedAt.IsZero(), "summary changed:", before != after)
	// Output:
	// kept by its digest: true
	// revoked: true summary changed: true
}

package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/services/reservation"
	"github.com/unkeyed/ratelimit/services/reservation/redisstore"
	"github.com/unkeyed/ratelimit/services/reservation/storetest"
)

// TestContract runs the contract suite on a real Redis, and two processes
// read the one secret the first stored.
func TestContract(t *testing.T) {
	r := testserver.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { client.Close() })
	storetest.TestLedger(t, redisstore.New(client))
	a, err := redisstore.Secret(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := redisstore.Secret(context.Background(), client)
	if len(a) != reservation.MinSecretLength || string(a) != string(b) {
		t.Fatalf("two processes read secrets of %d and %d bytes, equal %v", len(a), len(b), string(a) == string(b))
	}
}

// Package redisstore records settled reservations in the region's Redis, and
// keeps there the secret the region signs reservations with.
package redisstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/services/reservation"
)

// Ledger is a store.Ledger on the region's Redis: a reservation settles once across
// the processes of a region (a region without MySQL shares nothing with
// others).
type Ledger struct{ client redis.UniversalClient }

// New returns a ledger on client.
func New(client redis.UniversalClient) *Ledger { return &Ledger{client: client} }

// Claim implements store.Ledger with SET NX: the first claim sets the key, a later
// one reads it.
func (r *Ledger) Claim(ctx context.Context, id [16]byte, _ string, cost int64, expires time.Time) (bool, int64, error) {
	key := "ratelimit:v2:settled:" + hex.EncodeToString(id[:])
	ok, err := r.client.SetArgs(ctx, key, cost, redis.SetArgs{Mode: "NX", ExpireAt: expires}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, 0, fmt.Errorf("record settlement: %w", err)
	}
	if ok == "OK" {
		return true, cost, nil
	}
	v, err := r.client.Get(ctx, key).Result()
	if err != nil {
		return false, 0, fmt.Errorf("read settlement: %w", err)
	}
	first, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return false, 0, fmt.Errorf("read settlement: %w", err)
	}
	return false, first, nil
}

// Secret returns the reservation secret the processes of a region
// share through Ledger, storing a new one if there is none yet.
func Secret(ctx context.Context, client redis.UniversalClient) ([]byte, error) {
	const key = "ratelimit:v2:reservation-secret"
	if err := client.SetNX(ctx, key, reservation.NewSecret(), 0).Err(); err != nil {
		return nil, fmt.Errorf("store the reservation secret: %w", err)
	}
	secret, err := client.Get(ctx, key).Bytes()
	if err != nil {
		return nil, fmt.Errorf("read the reservation secret: %w", err)
	}
	return secret, nil
}

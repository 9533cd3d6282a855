package reservation

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a Ledger on the regional Redis: a reservation settles once across
// the processes of a region (a region without MySQL shares nothing with
// others).
type Redis struct{ client redis.UniversalClient }

// NewRedis returns a ledger on client.
func NewRedis(client redis.UniversalClient) *Redis { return &Redis{client: client} }

// Claim implements Ledger with SET NX: the first claim sets the key, a later
// one reads it.
func (r *Redis) Claim(ctx context.Context, id [16]byte, _ string, cost int64, expires time.Time) (bool, int64, error) {
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

// RedisSecret returns the reservation secret the processes of a region
// share through Redis, storing a new one if there is none yet.
func RedisSecret(ctx context.Context, client redis.UniversalClient) ([]byte, error) {
	const key = "ratelimit:v2:reservation-secret"
	if err := client.SetNX(ctx, key, NewSecret(), 0).Err(); err != nil {
		return nil, fmt.Errorf("store the reservation secret: %w", err)
	}
	secret, err := client.Get(ctx, key).Bytes()
	if err != nil {
		return nil, fmt.Errorf("read the reservation secret: %w", err)
	}
	return secret, nil
}

package storetest

import (
	"context"
	"sync/atomic"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// CountingRegional is a MemRegional that counts the calls made to it, by
// method: what a test that bounds a limiter's round trips reads.
type CountingRegional struct {
	*MemRegional
	Loads, Increments, Takes, Reads, Releases atomic.Int64
}

// NewCountingRegional returns an empty counting store.
func NewCountingRegional() *CountingRegional {
	return &CountingRegional{MemRegional: NewMemRegional()}
}

// Calls returns how many calls were made, every method together.
func (c *CountingRegional) Calls() int64 {
	return c.Loads.Load() + c.Increments.Load() + c.Takes.Load() + c.Reads.Load() + c.Releases.Load()
}

// Load implements [store.Regional], counted.
func (c *CountingRegional) Load(ctx context.Context, keys []store.CellKey) ([]int64, error) {
	c.Loads.Add(1)
	return c.MemRegional.Load(ctx, keys)
}

// Increment implements [store.Regional], counted.
func (c *CountingRegional) Increment(ctx context.Context, incs []store.Increment) ([]int64, error) {
	c.Increments.Add(1)
	return c.MemRegional.Increment(ctx, incs)
}

// TakeSlots implements [store.SlotTaker], counted.
func (c *CountingRegional) TakeSlots(ctx context.Context, t store.SlotTake) (store.SlotCounts, error) {
	c.Takes.Add(1)
	return c.MemRegional.TakeSlots(ctx, t)
}

// ReadSlots implements [store.SlotTaker], counted.
func (c *CountingRegional) ReadSlots(ctx context.Context, k store.CellKey, now int64, writer string) (store.SlotCounts, error) {
	c.Reads.Add(1)
	return c.MemRegional.ReadSlots(ctx, k, now, writer)
}

// ReleaseSlots implements [store.SlotTaker], counted.
func (c *CountingRegional) ReleaseSlots(ctx context.Context, inc store.Increment, now int64) (int64, []store.PoolCell, error) {
	c.Releases.Add(1)
	return c.MemRegional.ReleaseSlots(ctx, inc, now)
}

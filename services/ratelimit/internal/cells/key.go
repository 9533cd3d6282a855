package cells

import (
	"hash/maphash"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Key identifies one window: every cell of one limit of one
// identifier. The period is part of the key because the same identifier
// may be limited per second and per day at once; it names the cells (a
// window's length, a calendar, a token bucket's cells, a concurrency
// limit's pool cell: see package internal/period).
type Key struct {
	Workspace  string
	Namespace  string
	Identifier string
	Period     period.Period
	// Refunds names the window that holds the key's refunds (see
	// Service.GiveBack) rather than the key's own.
	Refunds bool
}

// CellKey returns the name of k's cell of seq, for the stores (as the
// window of k names it: see Window.CellKey).
func (k Key) CellKey(seq int64) store.CellKey {
	return store.CellKey{Workspace: k.Workspace, Namespace: k.Namespace, Identifier: k.Identifier,
		Duration: time.Duration(k.Period.Code()) * time.Millisecond, Sequence: seq, Refunds: k.Refunds}
}

// Owner returns the key of the window whose refunds k names (k, for a
// key that names a window's own counts): k without Refunds, and for the
// tokens given back to a token bucket, the bucket's cells.
func (k Key) Owner() Key {
	k.Refunds = false
	k.Period = k.Period.Bucket()
	return k
}

// Hash hashes every part separately and mixes the results, so that parts can
// never run into each other ("a-b"+"c" and "a"+"b-c" hash apart). Equal hashes
// of different keys are still possible and are resolved by comparing keys.
func (k Key) Hash(seed maphash.Seed) uint64 {
	h := maphash.String(seed, k.Workspace)
	h = mix(h, maphash.String(seed, k.Namespace))
	h = mix(h, maphash.String(seed, k.Identifier))
	h = mix(h, k.Period.Hash())
	if k.Refunds {
		h = mix(h, 1)
	}
	return h
}

// mix folds v into h (a multiply-xorshift step as in splitmix64).
func mix(h, v uint64) uint64 {
	h ^= v + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)
	h *= 0xbf58476d1ce4e5b9
	return h ^ (h >> 31)
}

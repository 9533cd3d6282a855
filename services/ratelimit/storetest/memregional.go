package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// ErrDown is the error of a call to a store that a test switched off.
var ErrDown = errors.New("store down")

// MemRegional is an in-memory [store.Regional] with what the limiter relies
// on from Redis: a count per cell, increments answered with the new count,
// counts clamped to [0, store.MaxCount] when read or incremented (a value
// a test sets with [MemRegional.Set] is held as written, as a corrupt value
// in Redis is), missing cells 0. Faults a test can
// switch on: the whole store down (every call fails, as on a dead server),
// one cell bad (its increment fails alone, as a corrupt key's does, with a
// [*store.PartialError]), and an identifier unreachable (its cells fail in
// every call while the others are answered, as those of one dead Redis
// Cluster master do). Expiry is not modelled: a cell is kept for ever.
// Its methods are safe for concurrent use; the zero value is not ready,
// use [NewMemRegional].
type MemRegional struct {
	mu          sync.Mutex
	counts      map[store.CellKey]int64
	bad         map[store.CellKey]bool
	unreachable map[string]bool // by identifier
	down        atomic.Bool
}

// NewMemRegional returns an empty in-memory regional store.
func NewMemRegional() *MemRegional {
	return &MemRegional{counts: map[store.CellKey]int64{}, bad: map[store.CellKey]bool{}, unreachable: map[string]bool{}}
}

// Load implements [store.Regional].
func (m *MemRegional) Load(ctx context.Context, keys []store.CellKey) ([]int64, error) {
	if err := m.callable(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int64, len(keys))
	failed := 0
	for i, k := range keys {
		if m.unreachable[k.Identifier] {
			out[i] = -1
			failed++
			continue
		}
		out[i] = min(max(m.counts[k], 0), store.MaxCount)
	}
	return out, cellErrors(failed, len(keys))
}

// Increment implements [store.Regional].
func (m *MemRegional) Increment(ctx context.Context, incs []store.Increment) ([]int64, error) {
	if err := m.callable(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int64, len(incs))
	failed := 0
	for i, inc := range incs {
		if m.bad[inc.Key] || m.unreachable[inc.Key.Identifier] {
			out[i] = -1
			failed++
			continue
		}
		n := min(max(m.counts[inc.Key]+inc.Delta, 0), store.MaxCount)
		m.counts[inc.Key] = n
		out[i] = n
	}
	return out, cellErrors(failed, len(incs))
}

// callable returns why a call cannot be made: the store is down or ctx is
// done.
func (m *MemRegional) callable(ctx context.Context) error {
	if m.down.Load() {
		return ErrDown
	}
	return ctx.Err()
}

// cellErrors is the error of a call of which failed of n cells failed.
func cellErrors(failed, n int) error {
	switch {
	case failed == 0:
		return nil
	case failed == n:
		return ErrDown
	default:
		return &store.PartialError{Err: ErrDown}
	}
}

// SetDown switches the whole store off (every call fails with [ErrDown])
// or on again.
func (m *MemRegional) SetDown(down bool) { m.down.Store(down) }

// SetBad makes increments of the cell k fail alone, as a corrupt key's do,
// or succeed again.
func (m *MemRegional) SetBad(k store.CellKey, bad bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bad[k] = bad
}

// SetUnreachable makes every cell of identifier fail in every call, as the
// keys of one dead server of a cluster do, or be answered again.
func (m *MemRegional) SetUnreachable(identifier string, unreachable bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unreachable[identifier] = unreachable
}

// Count returns what the store holds for k.
func (m *MemRegional) Count(k store.CellKey) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[k]
}

// Set makes the store hold n for k, as another writer would, unclamped.
func (m *MemRegional) Set(k store.CellKey, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[k] = n
}

package ratelimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// memOrigin is an in-memory Origin with what the limiter relies on from
// Redis (package redisorigin, whose tests show the same on real servers):
// a count per cell, increments answered with the new count, counts clamped
// to [0, MaxStoredCount], missing cells 0. While down, every call fails as
// on a dead server; an increment of a cell marked bad fails alone, as a
// corrupt key's does (a PartialError); the cells of an identifier marked
// unreachable fail in every call, as those of one dead Redis Cluster master
// do, while the others are answered. Expiry is not modelled: the tests
// never outlive a cell.
type memOrigin struct {
	mu          sync.Mutex
	counts      map[Cell]int64
	bad         map[Cell]bool
	unreachable map[string]bool // by identifier
	down        atomic.Bool
	calls       atomic.Int64
}

var errOriginDown = errors.New("origin down")

func newMemOrigin() *memOrigin {
	return &memOrigin{counts: map[Cell]int64{}, bad: map[Cell]bool{}, unreachable: map[string]bool{}}
}

func (m *memOrigin) Load(ctx context.Context, cells []Cell) ([]int64, error) {
	m.calls.Add(1)
	if m.down.Load() {
		return nil, errOriginDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int64, len(cells))
	failed := 0
	for i, c := range cells {
		if m.unreachable[c.Identifier] {
			out[i] = -1
			failed++
			continue
		}
		out[i] = m.counts[c]
	}
	return out, m.cellErrors(failed, len(cells))
}

// cellErrors is the error of a call of which failed of n cells failed.
func (m *memOrigin) cellErrors(failed, n int) error {
	switch {
	case failed == 0:
		return nil
	case failed == n:
		return errOriginDown
	default:
		return &PartialError{Err: errOriginDown}
	}
}

func (m *memOrigin) Increment(ctx context.Context, incs []Increment) ([]int64, error) {
	m.calls.Add(1)
	if m.down.Load() {
		return nil, errOriginDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int64, len(incs))
	failed := 0
	for i, inc := range incs {
		if m.bad[inc.Cell] || m.unreachable[inc.Cell.Identifier] {
			out[i] = -1
			failed++
			continue
		}
		n := min(max(m.counts[inc.Cell]+inc.Delta, 0), MaxStoredCount)
		m.counts[inc.Cell] = n
		out[i] = n
	}
	return out, m.cellErrors(failed, len(incs))
}

// count returns what the origin holds for c.
func (m *memOrigin) count(c Cell) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[c]
}

// set makes the origin hold n for c, as another writer would.
func (m *memOrigin) set(c Cell, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[c] = n
}

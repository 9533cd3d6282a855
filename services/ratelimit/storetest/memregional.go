package storetest

import (
	"context"
	"sync"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// MemRegional is an in-memory [store.Regional] with what the limiter relies
// on from Redis: a count per cell, increments (raised to their floor)
// answered with the new count, refunds' totals kept per writer and summed,
// counts clamped to [0, store.MaxCount] when read or incremented (a value
// a test sets with [MemRegional.Set] is held as written, as a corrupt value
// in Redis is), missing cells 0. It never fails but for a done context;
// [FaultyRegional] adds faults to it as to any store. Expiry is not
// modelled: a cell is kept for ever. Its methods are safe for concurrent
// use; the zero value is not ready, use [NewMemRegional].
type MemRegional struct {
	mu     sync.Mutex
	counts map[store.CellKey]int64
	// totals holds each writer's largest total of a cell's refunds.
	totals map[store.CellKey]map[string]int64
}

// NewMemRegional returns an empty in-memory regional store.
func NewMemRegional() *MemRegional {
	return &MemRegional{counts: map[store.CellKey]int64{}, totals: map[store.CellKey]map[string]int64{}}
}

// Load implements [store.Regional].
func (m *MemRegional) Load(ctx context.Context, keys []store.CellKey) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = min(max(m.counts[k], 0), store.MaxCount)
	}
	return out, nil
}

// Increment implements [store.Regional].
func (m *MemRegional) Increment(ctx context.Context, incs []store.Increment) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int64, len(incs))
	for i, inc := range incs {
		if inc.Writer != "" {
			out[i] = m.addTotal(inc)
			continue
		}
		n := min(max(m.counts[inc.Key]+inc.Delta, inc.Floor, 0), store.MaxCount)
		m.counts[inc.Key] = n
		out[i] = n
	}
	return out, nil
}

// addTotal keeps inc's total as its writer's if it is the largest, and
// adds what that writer's total grew by to the cell.
func (m *MemRegional) addTotal(inc store.Increment) int64 {
	w := m.totals[inc.Key]
	if w == nil {
		w = map[string]int64{}
		m.totals[inc.Key] = w
	}
	if old := w[inc.Writer]; inc.Total > old {
		w[inc.Writer] = inc.Total
		m.counts[inc.Key] = min(max(m.counts[inc.Key], 0)+inc.Total-old, store.MaxCount)
	}
	return min(max(m.counts[inc.Key], 0), store.MaxCount)
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

// Lose drops what the store holds for k, its writers' totals too, as a
// store restarted without its data would.
func (m *MemRegional) Lose(k store.CellKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.counts, k)
	delete(m.totals, k)
}

// TakeSlots implements [store.SlotTaker].
func (m *MemRegional) TakeSlots(ctx context.Context, t store.SlotTake) (store.SlotCounts, error) {
	if err := ctx.Err(); err != nil {
		return store.SlotCounts{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := store.SlotKeys(t.Key)
	read := func(k store.CellKey) int64 { return min(max(m.counts[k], 0), store.MaxCount) }
	c := store.SlotCounts{Cur: read(keys[0]), Prev: read(keys[1]), CurRefunds: read(keys[2]), PrevRefunds: read(keys[3])}
	old := m.totals[t.Key][t.Writer]
	if old >= t.Total {
		c.Taken = true // applied before: its answer was lost
		return c, nil
	}
	if add := t.Total - old; c.Held(t.Beyond) <= t.Limit-add && c.Cur <= store.MaxCount-add {
		c.Cur = m.addTotal(store.Increment{Key: t.Key, Writer: t.Writer, Total: t.Total})
		c.Taken = true
	}
	return c, nil
}

package storetest

import (
	"context"
	"fmt"
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

// Both take slots atomically, as Redis does: the limiter asks for it at
// run time, and a store that lost a method of the interface would decide
// slots from memory without a word.
var (
	_ store.SlotTaker = (*MemRegional)(nil)
	_ store.SlotTaker = (*FaultyRegional)(nil)
)

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

// TakeSlots implements [store.SlotTaker]: its pool is every cell of the
// store of the key's identity (and the cells t.Beyond names) that had
// not ended at t.Now.
func (m *MemRegional) TakeSlots(ctx context.Context, t store.SlotTake) (store.SlotCounts, error) {
	if err := ctx.Err(); err != nil {
		return store.SlotCounts{}, err
	}
	if !store.IsPoolCode(t.Key.Duration.Milliseconds()) || t.Key.Refunds {
		return store.SlotCounts{}, fmt.Errorf("take slots: %d is not a pool's cell", t.Key.Duration.Milliseconds())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.pool(t.Key, t.Now, t.Beyond)
	old := m.totals[t.Key][t.Writer]
	if old >= t.Total {
		c.Taken = true // applied before: its answer was lost
		return c, nil
	}
	if add := t.Total - old; c.Held(t.Beyond) <= t.Limit-add && c.Cells[0].Count <= store.MaxCount-add {
		c.Cells[0].Count = m.addTotal(store.Increment{Key: t.Key, Writer: t.Writer, Total: t.Total})
		c.Taken = true
	}
	return c, nil
}

// ReadSlots implements [store.SlotTaker].
func (m *MemRegional) ReadSlots(ctx context.Context, k store.CellKey, now int64, writer string) (store.SlotCounts, error) {
	if err := ctx.Err(); err != nil {
		return store.SlotCounts{}, err
	}
	if !store.IsPoolCode(k.Duration.Milliseconds()) || k.Refunds {
		return store.SlotCounts{}, fmt.Errorf("read slots: %d is not a pool's cell", k.Duration.Milliseconds())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.pool(k, now, nil)
	if writer != "" {
		c.Written = m.totals[k][writer]
	}
	return c, nil
}

// ReleaseSlots implements [store.SlotTaker]: the write, then the read, as
// one step under the store's lock.
func (m *MemRegional) ReleaseSlots(ctx context.Context, inc store.Increment, now int64) (int64, []store.PoolCell, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	if !store.IsPoolCode(inc.Key.Duration.Milliseconds()) || !inc.Key.Refunds || inc.Writer == "" {
		return 0, nil, fmt.Errorf("release slots: %d is not the releases of a pool's cell, written as a total", inc.Key.Duration.Milliseconds())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.addTotal(inc)
	k := inc.Key
	k.Refunds = false
	return n, m.pool(k, now, nil).Cells, nil
}

// pool returns the cells of the pool of key that had not ended at now,
// key's first, with the cells beyond names. m.mu is held.
func (m *MemRegional) pool(key store.CellKey, now int64, beyond []store.PoolCell) store.SlotCounts {
	read := func(k store.CellKey) int64 { return min(max(m.counts[k], 0), store.MaxCount) }
	var c store.SlotCounts
	seen := map[store.CellKey]bool{}
	add := func(k store.CellKey) {
		k.Refunds = false
		if seen[k] || !store.SamePool(&k, &key) || store.PoolCellEndOf(&k) <= now && k != key {
			return
		}
		seen[k] = true
		r := k
		r.Refunds = true
		c.Cells = append(c.Cells, store.PoolCell{Key: k, Count: read(k), Refunds: read(r)})
	}
	add(key)
	for k := range m.counts {
		add(k)
	}
	for _, b := range beyond {
		add(b.Key)
	}
	return c
}

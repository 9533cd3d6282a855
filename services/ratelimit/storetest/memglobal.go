package storetest

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// MemGlobal is an in-memory [store.Global] with the semantics of package
// mysqlstore: one row per cell and region, raised with GREATEST and stamped
// with the store's own clock, which no writer's clock affects, and with the
// writer's limit; a sync returns, per live cell (a cell expires at the end
// of the window after its own), this region's row and the sum of the
// others', for every cell or only those with a row changed at or after
// since. The store's clock starts at [MemGlobalEpoch] and moves one second
// per publish and per sync, whatever the callers' clocks say. It counts the
// publishes and the rows they carried and records the since of every sync.
// It never fails but for a done context; [FaultyGlobal] adds faults to it
// as to any store. Its methods are safe for concurrent use; use
// [NewMemGlobal].
type MemGlobal struct {
	mu                   sync.Mutex
	rows                 map[store.CellKey]map[string]memRow
	publishes, published atomic.Int64
	sinces               []time.Time
	ticks                int64 // publishes and syncs so far: the store's clock
}

// MemGlobalEpoch is a [MemGlobal]'s clock before its first call, in unix ms.
const MemGlobalEpoch = 600_000

type memRow struct {
	count, limit, updatedAt int64
}

// NewMemGlobal returns an empty in-memory global store.
func NewMemGlobal() *MemGlobal { return &MemGlobal{rows: map[store.CellKey]map[string]memRow{}} }

// now advances the store's clock by one tick and returns it in unix ms.
func (m *MemGlobal) now() int64 {
	m.ticks++
	return MemGlobalEpoch + m.ticks*1000
}

// Publish implements [store.Global].
func (m *MemGlobal) Publish(ctx context.Context, region string, counts []store.CellCount) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.publishes.Add(1)
	m.published.Add(int64(len(counts)))
	m.mu.Lock()
	defer m.mu.Unlock()
	stamp := m.now()
	for _, c := range counts {
		byRegion := m.rows[c.Key]
		if byRegion == nil {
			byRegion = map[string]memRow{}
			m.rows[c.Key] = byRegion
		}
		limit := c.Limit
		if limit == 0 {
			limit = byRegion[region].limit // unknown: the row keeps its own
		}
		byRegion[region] = memRow{count: max(byRegion[region].count, c.Count), limit: limit, updatedAt: stamp}
	}
	return len(counts), nil
}

// Sync implements [store.Global].
func (m *MemGlobal) Sync(ctx context.Context, region string, now, since time.Time) ([]store.GlobalCount, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sinces = append(m.sinces, since)
	asOf := time.UnixMilli(m.now())
	var out []store.GlobalCount
	for k, byRegion := range m.rows {
		if k.ExpiresAt() <= now.UnixMilli() {
			continue // expired
		}
		changed := since.IsZero()
		g := store.GlobalCount{Key: k}
		for r, row := range byRegion {
			changed = changed || row.updatedAt >= since.UnixMilli()
			if r == region {
				g.Own += row.count
			} else {
				g.Others += row.count
				g.OthersLimit = max(g.OthersLimit, row.limit)
			}
		}
		if changed {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b store.GlobalCount) int { return store.CompareKeys(&a.Key, &b.Key) })
	return out, asOf, nil
}

// Insert writes one row as another writer would, without the GREATEST:
// count and limit for region, stamped updatedAt (unix ms) by the store's
// clock.
func (m *MemGlobal) Insert(k store.CellKey, region string, count, limit, updatedAt int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rows[k] == nil {
		m.rows[k] = map[string]memRow{}
	}
	m.rows[k][region] = memRow{count: count, limit: limit, updatedAt: updatedAt}
}

// Publishes returns how many publishes succeeded.
func (m *MemGlobal) Publishes() int64 { return m.publishes.Load() }

// Published returns how many rows the publishes carried.
func (m *MemGlobal) Published() int64 { return m.published.Load() }

// Sinces returns the since of every sync so far, in order.
func (m *MemGlobal) Sinces() []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.sinces)
}

// Dump returns "identifier/sequence/region=count" for every row, sorted,
// with "/refunds" after the sequence for a cell's refunds.
func (m *MemGlobal) Dump() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k, byRegion := range m.rows {
		for r, row := range byRegion {
			name := k.Identifier + "/" + strconv.FormatInt(k.Sequence, 10)
			if k.Refunds {
				name += "/refunds"
			}
			out = append(out, name+"/"+r+"="+strconv.FormatInt(row.count, 10))
		}
	}
	slices.Sort(out)
	return out
}

package ratelimit

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// memStore is an in-memory GlobalStore with the semantics of package
// mysqlstore, whose tests show them on a real MariaDB: one row per cell and
// region, raised with GREATEST and stamped with the store's own clock (see
// now), which no writer's clock affects, and the writer's limit; a sync
// returns, per live cell (expiry: the end of the window after
// the cell's), this region's row and the sum of the others', for every cell
// or only those with a row changed at or after since. While down, every
// call fails. It counts the publishes and the rows they carried, and records
// the since of every sync.
type memStore struct {
	mu                   sync.Mutex
	rows                 map[Cell]map[string]memRow
	down                 atomic.Bool
	publishes, published atomic.Int64
	sinces               []time.Time
	// ticks counts the publishes and syncs: the store's clock.
	ticks int64
}

// memStoreEpoch is the store's time before its first call, in unix ms.
const memStoreEpoch = 600_000

// now advances the store's clock by one second, one tick, and returns it:
// every publish and sync happens a second after the one before, whatever
// the callers' clocks say.
func (m *memStore) now() int64 {
	m.ticks++
	return memStoreEpoch + m.ticks*1000
}

type memRow struct {
	count, limit, updatedAt int64
}

var errStoreDown = errors.New("store down")

func newMemStore() *memStore { return &memStore{rows: map[Cell]map[string]memRow{}} }

func (m *memStore) Publish(ctx context.Context, region string, counts []CellCount) (int, error) {
	if m.down.Load() {
		return 0, errStoreDown
	}
	m.publishes.Add(1)
	m.published.Add(int64(len(counts)))
	m.mu.Lock()
	defer m.mu.Unlock()
	stamp := m.now()
	for _, c := range counts {
		m.put(c.Cell, region, c.Count, c.Limit, stamp)
	}
	return len(counts), nil
}

// put upserts one row as the store's upsert does: the count only rises, the
// stamp and the limit are the writer's.
func (m *memStore) put(c Cell, region string, count, limit, updatedAt int64) {
	byRegion := m.rows[c]
	if byRegion == nil {
		byRegion = map[string]memRow{}
		m.rows[c] = byRegion
	}
	byRegion[region] = memRow{count: max(byRegion[region].count, count), limit: limit, updatedAt: updatedAt}
}

// insert writes one row as another writer would, without the GREATEST.
func (m *memStore) insert(c Cell, region string, count, limit, updatedAt int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rows[c] == nil {
		m.rows[c] = map[string]memRow{}
	}
	m.rows[c][region] = memRow{count: count, limit: limit, updatedAt: updatedAt}
}

func (m *memStore) Sync(ctx context.Context, region string, now, since time.Time) ([]GlobalCount, time.Time, error) {
	if m.down.Load() {
		return nil, time.Time{}, errStoreDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sinces = append(m.sinces, since)
	asOf := time.UnixMilli(m.now())
	var out []GlobalCount
	for c, byRegion := range m.rows {
		if (c.Sequence+2)*c.Duration.Milliseconds() <= now.UnixMilli() {
			continue // expired
		}
		changed := since.IsZero()
		g := GlobalCount{Cell: c}
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
	// The store groups by its unique key, so rows come in key order.
	slices.SortFunc(out, func(a, b GlobalCount) int { return compareCells(&a.Cell, &b.Cell) })
	return out, asOf, nil
}

// dump returns "identifier/sequence/region=count" for every row, sorted.
func (m *memStore) dump() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for c, byRegion := range m.rows {
		for r, row := range byRegion {
			out = append(out, c.Identifier+"/"+itoa(c.Sequence)+"/"+r+"="+itoa(row.count))
		}
	}
	sort.Strings(out)
	return out
}

// Package memstore records settled reservations in one process's memory,
// for a process without Redis or MySQL.
package memstore

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrFull is returned by Ledger.Claim when it holds the most records it
// may.
var ErrFull = errors.New("reservation ledger full")

// Ledger is a store.Ledger in the memory of one process, for a process without
// Redis or MySQL. It holds at most max records, and one workspace at most a
// tenth of them, so that no tenant can fill it for the others; expired ones
// make room.
type Ledger struct {
	mu         sync.Mutex
	now        func() time.Time
	max        int
	records    map[[16]byte]memoryRecord
	perWS      map[string]int
	nextExpiry time.Time // no sweep for expired records before then
}

type memoryRecord struct {
	workspace string
	cost      int64
	expires   time.Time
}

// DefaultRecords is how many settled reservations a Ledger holds: some 50 MiB at most.
const DefaultRecords = 500_000

// New returns an empty ledger of at most max records, on the clock
// now.
func New(max int, now func() time.Time) *Ledger {
	return &Ledger{now: now, max: max, records: map[[16]byte]memoryRecord{}, perWS: map[string]int{}}
}

// Claim implements store.Ledger.
func (m *Ledger) Claim(_ context.Context, id [16]byte, workspace string, cost int64, expires time.Time) (bool, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if r, ok := m.records[id]; ok && r.expires.After(now) {
		return false, r.cost, nil
	}
	perWS := max(1, m.max/10)
	if (len(m.records) >= m.max || m.perWS[workspace] >= perWS) && !now.Before(m.nextExpiry) {
		// Sweep at most once a second: a full ledger must not cost every
		// claim a walk of it.
		m.nextExpiry = now.Add(time.Second)
		for k, r := range m.records {
			if !r.expires.After(now) {
				m.drop(k, r)
			}
		}
	}
	if len(m.records) >= m.max || m.perWS[workspace] >= perWS {
		return false, 0, ErrFull
	}
	if old, ok := m.records[id]; ok {
		m.drop(id, old)
	}
	m.records[id] = memoryRecord{workspace: workspace, cost: cost, expires: expires}
	m.perWS[workspace]++
	return true, cost, nil
}

func (m *Ledger) drop(id [16]byte, r memoryRecord) {
	delete(m.records, id)
	if m.perWS[r.workspace]--; m.perWS[r.workspace] <= 0 {
		delete(m.perWS, r.workspace)
	}
}

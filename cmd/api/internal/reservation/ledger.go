package reservation

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Ledger records which reservations were settled, so that each settles
// once. Implementations: Memory (one process), Redis (the processes of a
// region), MySQL (every region).
type Ledger interface {
	// Claim records that reservation id is settled at cost, keeping the
	// record until expires. It returns true for the first claim of id,
	// and otherwise false and the cost of that first claim.
	Claim(ctx context.Context, id [16]byte, cost int64, expires time.Time) (first bool, firstCost int64, err error)
}

// ErrLedgerFull is returned by Memory.Claim when it holds the most records
// it may.
var ErrLedgerFull = errors.New("reservation ledger full")

// Memory is a Ledger in the memory of one process, for a process without
// Redis or MySQL. It holds at most max records; expired ones make room.
type Memory struct {
	mu      sync.Mutex
	now     func() time.Time
	max     int
	records map[[16]byte]memoryRecord
}

type memoryRecord struct {
	cost    int64
	expires time.Time
}

// DefaultMemoryRecords is how many settled reservations a Memory ledger
// holds: about 40 MiB at most.
const DefaultMemoryRecords = 500_000

// NewMemory returns an empty ledger of at most max records, on the clock
// now.
func NewMemory(max int, now func() time.Time) *Memory {
	return &Memory{now: now, max: max, records: map[[16]byte]memoryRecord{}}
}

// Claim implements Ledger.
func (m *Memory) Claim(_ context.Context, id [16]byte, cost int64, expires time.Time) (bool, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if r, ok := m.records[id]; ok && r.expires.After(now) {
		return false, r.cost, nil
	}
	if len(m.records) >= m.max {
		for k, r := range m.records {
			if !r.expires.After(now) {
				delete(m.records, k)
			}
		}
		if len(m.records) >= m.max {
			return false, 0, ErrLedgerFull
		}
	}
	m.records[id] = memoryRecord{cost: cost, expires: expires}
	return true, cost, nil
}

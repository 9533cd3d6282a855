package reservation

import (
	"context"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// Ledger records which reservations were settled, so that each settles
// once. Implementations: Memory (one process), Redis (the processes of a
// region), MySQL (every region). A token carries the scope of the ledger of
// the process that issued it, and settles only where that ledger is.
type Ledger interface {
	// Claim records that reservation id of workspace is settled at cost,
	// keeping the record until expires. It returns true for the first
	// claim of id, and otherwise false and the cost of that first claim.
	Claim(ctx context.Context, id [16]byte, workspace string, cost int64, expires time.Time) (first bool, firstCost int64, err error)
}

// NewProcessID returns a random name for this process's ledger scope.
func NewProcessID() string {
	id := NewID()
	return hex.EncodeToString(id[:8])
}

// ErrLedgerFull is returned by Memory.Claim when it holds the most records
// it may.
var ErrLedgerFull = errors.New("reservation ledger full")

// Memory is a Ledger in the memory of one process, for a process without
// Redis or MySQL. It holds at most max records, and one workspace at most a
// tenth of them, so that no tenant can fill it for the others; expired ones
// make room.
type Memory struct {
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

// DefaultMemoryRecords is how many settled reservations a Memory ledger
// holds: some 50 MiB at most.
const DefaultMemoryRecords = 500_000

// NewMemory returns an empty ledger of at most max records, on the clock
// now.
func NewMemory(max int, now func() time.Time) *Memory {
	return &Memory{now: now, max: max, records: map[[16]byte]memoryRecord{}, perWS: map[string]int{}}
}

// Claim implements Ledger.
func (m *Memory) Claim(_ context.Context, id [16]byte, workspace string, cost int64, expires time.Time) (bool, int64, error) {
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
		return false, 0, ErrLedgerFull
	}
	if old, ok := m.records[id]; ok {
		m.drop(id, old)
	}
	m.records[id] = memoryRecord{workspace: workspace, cost: cost, expires: expires}
	m.perWS[workspace]++
	return true, cost, nil
}

func (m *Memory) drop(id [16]byte, r memoryRecord) {
	delete(m.records, id)
	if m.perWS[r.workspace]--; m.perWS[r.workspace] <= 0 {
		delete(m.perWS, r.workspace)
	}
}

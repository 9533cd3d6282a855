// Package memstore keeps a process's audit log in its memory, for a
// process without MySQL: the latest entries, up to a bound, lost at
// restart.
package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/unkeyed/ratelimit/services/audit/store"
)

// DefaultEntries is how many entries a Store keeps.
const DefaultEntries = 10000

// Store is a store.Log in this process's memory: the latest entries, up to
// a bound. It is safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	max     int
	entries []store.Entry // oldest first
	next    int64
	now     func() time.Time
}

// New returns a Store keeping the latest max entries.
func New(max int) *Store { return &Store{max: max, next: 1, now: time.Now} }

// Record implements store.Log.
func (m *Store) Record(_ context.Context, e store.Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.ID, e.Time = m.next, m.now().UTC().Truncate(time.Millisecond)
	m.next++
	if len(m.entries) == m.max {
		copy(m.entries, m.entries[1:])
		m.entries = m.entries[:m.max-1]
	}
	m.entries = append(m.entries, e)
	return nil
}

// List implements store.Log.
func (m *Store) List(_ context.Context, workspace string, f store.Filter, before int64, limit int) ([]store.Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Entry
	for i := len(m.entries) - 1; i >= 0 && len(out) < limit; i-- {
		e := m.entries[i]
		if e.Workspace == workspace && (before == 0 || e.ID < before) && f.Matches(e) {
			out = append(out, e)
		}
	}
	return out, nil
}

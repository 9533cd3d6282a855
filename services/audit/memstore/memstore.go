// Package memstore keeps a process's audit log in its memory, for a
// process without MySQL: each workspace's latest entries, up to a bound,
// lost at restart.
package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/unkeyed/ratelimit/services/audit/store"
)

// DefaultEntries is how many entries a Store keeps of each workspace.
const DefaultEntries = 10000

// Store is a store.Log in this process's memory: the latest entries of
// each workspace, up to a bound a workspace, so that one tenant's changes
// never push another's history out. Workspaces come from the keys, so
// the whole is bounded by the key set. It is safe for concurrent use.
type Store struct {
	mu         sync.Mutex
	max        int
	workspaces map[string]*ring
	next       int64
	now        func() time.Time
}

// ring is one workspace's latest entries: the oldest at start once full.
type ring struct {
	entries []store.Entry
	start   int
}

// New returns a Store keeping the latest max entries of each workspace.
func New(max int) *Store {
	return &Store{max: max, workspaces: map[string]*ring{}, next: 1, now: time.Now}
}

// Record implements store.Log.
func (m *Store) Record(_ context.Context, e store.Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.ID, e.Time = m.next, m.now().UTC().Truncate(time.Millisecond)
	m.next++
	r := m.workspaces[e.Workspace]
	if r == nil {
		r = &ring{}
		m.workspaces[e.Workspace] = r
	}
	if len(r.entries) < m.max {
		r.entries = append(r.entries, e)
		return nil
	}
	r.entries[r.start] = e
	r.start = (r.start + 1) % m.max
	return nil
}

// List implements store.Log.
func (m *Store) List(_ context.Context, workspace string, f store.Filter, before int64, limit int) ([]store.Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.workspaces[workspace]
	if r == nil {
		return nil, nil
	}
	var out []store.Entry
	for i := len(r.entries) - 1; i >= 0 && len(out) < limit; i-- {
		e := r.entries[(r.start+i)%len(r.entries)]
		if (before == 0 || e.ID < before) && f.Matches(e) {
			out = append(out, e)
		}
	}
	return out, nil
}

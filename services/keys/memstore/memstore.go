// Package memstore keeps keys in this process's memory, for tests and
// tools: a process without MySQL manages no keys.
package memstore

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/unkeyed/ratelimit/services/keys/store"
)

// Store is a store.Store in this process's memory. It is safe for concurrent
// use.
type Store struct {
	mu       sync.Mutex
	keys     []store.Key // in creation order
	revision int64
	sum      int64 // exclusive-or of the revisions, as MySQL's summary
	revs     map[string]int64
	now      func() time.Time
}

// New returns an empty Store.
func New() *Store { return &Store{revs: map[string]int64{}, now: time.Now} }

// Create implements store.Store.
func (m *Store) Create(_ context.Context, k store.Key) (store.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.keys {
		if o.ID == k.ID || o.Digest == k.Digest {
			return store.Key{}, store.ErrDuplicate
		}
	}
	now := m.now().UTC().Truncate(time.Millisecond)
	k.CreatedAt, k.UpdatedAt, k.RevokedAt = now, now, time.Time{}
	k.Permissions = slices.Clone(k.Permissions)
	k.Revision = m.bump(k.ID)
	m.keys = append(m.keys, k)
	return k, nil
}

// bump gives the key id a new revision and returns it.
func (m *Store) bump(id string) int64 {
	m.revision++
	m.sum ^= m.revs[id] ^ m.revision
	m.revs[id] = m.revision
	return m.revision
}

// find returns the index of a key of workspace, or -1.
func (m *Store) find(workspace, id string) int {
	return slices.IndexFunc(m.keys, func(k store.Key) bool { return k.Workspace == workspace && k.ID == id })
}

// Get implements store.Store.
func (m *Store) Get(_ context.Context, workspace, id string) (store.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.find(workspace, id)
	if i < 0 {
		return store.Key{}, store.ErrNotFound
	}
	return m.keys[i], nil
}

// List implements store.Store.
func (m *Store) List(_ context.Context, workspace, after string, limit int) ([]store.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Key
	for _, k := range m.keys {
		if k.Workspace == workspace && k.ID > after {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b store.Key) int { return strings.Compare(a.ID, b.ID) })
	return out[:min(len(out), limit)], nil
}

// Count implements store.Store.
func (m *Store) Count(_ context.Context, workspace string) (total, live int64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.keys {
		if k.Workspace == workspace {
			total++
			if k.RevokedAt.IsZero() {
				live++
			}
		}
	}
	return total, live, nil
}

// SetPermissions implements store.Store.
func (m *Store) SetPermissions(_ context.Context, workspace, id string, permissions []string) (store.Key, error) {
	return m.change(workspace, id, func(k *store.Key, _ time.Time) { k.Permissions = slices.Clone(permissions) })
}

// Revoke implements store.Store.
func (m *Store) Revoke(_ context.Context, workspace, id string) (store.Key, error) {
	return m.change(workspace, id, func(k *store.Key, now time.Time) { k.RevokedAt = now })
}

// change applies f to a live key of workspace.
func (m *Store) change(workspace, id string, f func(*store.Key, time.Time)) (store.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.find(workspace, id)
	if i < 0 || !m.keys[i].RevokedAt.IsZero() {
		return store.Key{}, store.ErrNotFound
	}
	now := m.now().UTC().Truncate(time.Millisecond)
	f(&m.keys[i], now)
	m.keys[i].UpdatedAt = now
	m.keys[i].Revision = m.bump(id)
	return m.keys[i], nil
}

// Summary implements store.Store.
func (m *Store) Summary(context.Context) (store.Summary, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return store.Summary{Rows: int64(len(m.keys)), Revisions: m.sum}, nil
}

// Changes implements store.Store.
func (m *Store) Changes(_ context.Context, since int64) ([]store.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Key
	for _, k := range m.keys {
		if k.Revision >= since {
			out = append(out, k)
		}
	}
	return out, nil
}

// All implements store.Store.
func (m *Store) All(context.Context) ([]store.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.keys), nil
}

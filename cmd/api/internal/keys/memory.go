package keys

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// Memory is a Store in this process's memory. It is safe for concurrent
// use.
type Memory struct {
	mu       sync.Mutex
	keys     []Key // in creation order
	revision int64
	sum      int64 // exclusive-or of the revisions, as MySQL's summary
	revs     map[string]int64
	now      func() time.Time
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{revs: map[string]int64{}, now: time.Now} }

// Create implements Store.
func (m *Memory) Create(_ context.Context, k Key) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.keys {
		if o.ID == k.ID || o.Digest == k.Digest {
			return Key{}, ErrDuplicate
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
func (m *Memory) bump(id string) int64 {
	m.revision++
	m.sum ^= m.revs[id] ^ m.revision
	m.revs[id] = m.revision
	return m.revision
}

// find returns the index of a key of workspace, or -1.
func (m *Memory) find(workspace, id string) int {
	return slices.IndexFunc(m.keys, func(k Key) bool { return k.Workspace == workspace && k.ID == id })
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, workspace, id string) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.find(workspace, id)
	if i < 0 {
		return Key{}, ErrNotFound
	}
	return m.keys[i], nil
}

// List implements Store.
func (m *Memory) List(_ context.Context, workspace, after string, limit int) ([]Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Key
	for _, k := range m.keys {
		if k.Workspace == workspace && k.ID > after {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b Key) int { return strings.Compare(a.ID, b.ID) })
	return out[:min(len(out), limit)], nil
}

// Count implements Store.
func (m *Memory) Count(_ context.Context, workspace string) (total, live int64, err error) {
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

// SetPermissions implements Store.
func (m *Memory) SetPermissions(_ context.Context, workspace, id string, permissions []string) (Key, error) {
	return m.change(workspace, id, func(k *Key, _ time.Time) { k.Permissions = slices.Clone(permissions) })
}

// Revoke implements Store.
func (m *Memory) Revoke(_ context.Context, workspace, id string) (Key, error) {
	return m.change(workspace, id, func(k *Key, now time.Time) { k.RevokedAt = now })
}

// change applies f to a live key of workspace.
func (m *Memory) change(workspace, id string, f func(*Key, time.Time)) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.find(workspace, id)
	if i < 0 || !m.keys[i].RevokedAt.IsZero() {
		return Key{}, ErrNotFound
	}
	now := m.now().UTC().Truncate(time.Millisecond)
	f(&m.keys[i], now)
	m.keys[i].UpdatedAt = now
	m.keys[i].Revision = m.bump(id)
	return m.keys[i], nil
}

// Summary implements Store.
func (m *Memory) Summary(context.Context) (Summary, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Summary{Rows: int64(len(m.keys)), Revisions: m.sum}, nil
}

// Changes implements Store.
func (m *Memory) Changes(_ context.Context, since int64) ([]Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Key
	for _, k := range m.keys {
		if k.Revision >= since {
			out = append(out, k)
		}
	}
	return out, nil
}

// All implements Store.
func (m *Memory) All(context.Context) ([]Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.keys), nil
}

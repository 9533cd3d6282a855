package audit

import (
	"context"
	"sync"
	"time"
)

// DefaultMemoryEntries is how many entries a Memory keeps.
const DefaultMemoryEntries = 10000

// Memory is a Log in this process's memory, for a process without MySQL:
// the latest entries, up to a bound, lost at restart. It is safe for
// concurrent use.
type Memory struct {
	mu      sync.Mutex
	max     int
	entries []Entry // oldest first
	next    int64
	now     func() time.Time
}

// NewMemory returns a Memory keeping the latest max entries.
func NewMemory(max int) *Memory { return &Memory{max: max, next: 1, now: time.Now} }

// Record implements Log.
func (m *Memory) Record(_ context.Context, e Entry) error {
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

// List implements Log.
func (m *Memory) List(_ context.Context, workspace string, f Filter, before int64, limit int) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Entry
	for i := len(m.entries) - 1; i >= 0 && len(out) < limit; i-- {
		e := m.entries[i]
		if e.Workspace == workspace && (before == 0 || e.ID < before) && f.matches(e) {
			out = append(out, e)
		}
	}
	return out, nil
}

// matches reports whether e passes f.
func (f Filter) matches(e Entry) bool {
	return (f.Action == "" || e.Action == f.Action) && (f.Target == "" || e.Target == f.Target) &&
		(f.Actor == "" || e.Actor == f.Actor) && (f.Since.IsZero() || !e.Time.Before(f.Since)) &&
		(f.Until.IsZero() || e.Time.Before(f.Until))
}

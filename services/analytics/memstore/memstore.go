// Package memstore keeps a process's analytics and roll call in its memory,
// for a process without MySQL: bounded, lost at restart.
package memstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/analytics/store"
)

// Store is a store.Store and a store.Fleet in the memory of one process, for a process
// without MySQL: it keeps minutes only (analytics.MinuteRetention of them), answers
// coarser granularities by adding them up, and knows only its own process.
// It holds at most maxRows buckets and named identifiers together; past it,
// Add refuses what is new (ErrFull) and keeps what it holds.
type Store struct {
	mu        sync.Mutex
	now       func() time.Time
	maxRows   int
	buckets   map[memKey]*store.Point
	top       map[memTopKey]*store.Identifier
	processes map[string]store.Process
	// batches are the batch ids added, with when: an hour of them, so a
	// batch sent again is not added twice.
	batches map[string]time.Time
}

type memKey struct {
	workspace, namespace string
	minute               int64 // unix ms
}

type memTopKey struct {
	memKey
	identifier string
}

// ErrFull is returned by Store.Add when it holds the most rows it may.
var ErrFull = errors.New("analytics store full")

// DefaultRows bounds a Store: some 100 MiB at most.
const DefaultRows = 500_000

// New returns an empty store of at most maxRows rows on the clock now.
func New(maxRows int, now func() time.Time) *Store {
	return &Store{now: now, maxRows: maxRows, buckets: map[memKey]*store.Point{}, top: map[memTopKey]*store.Identifier{},
		processes: map[string]store.Process{}, batches: map[string]time.Time{}}
}

// Add implements store.Store. A batch is recorded as added even when the
// store is full and refuses some of its rows: sending it again would add
// the others twice.
func (m *Store) Add(_ context.Context, batch string, buckets []store.Bucket, top []store.Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	if _, dup := m.batches[batch]; dup {
		return nil
	}
	m.batches[batch] = m.now()
	full := false
	for _, b := range buckets {
		k := memKey{b.Workspace, b.Namespace, b.Start.UnixMilli()}
		p, ok := m.buckets[k]
		if !ok {
			if m.rows() >= m.maxRows {
				full = true
				continue
			}
			p = &store.Point{Start: b.Start}
			m.buckets[k] = p
		}
		p.Passed += b.Passed
		p.Denied += b.Denied
		p.ShadowDenied += b.ShadowDenied
	}
	for _, e := range top {
		k := memTopKey{memKey{e.Workspace, e.Namespace, e.Start.UnixMilli()}, e.Identifier}
		it, ok := m.top[k]
		if !ok {
			if m.rows() >= m.maxRows {
				full = true
				continue
			}
			it = &store.Identifier{Identifier: e.Identifier}
			m.top[k] = it
		}
		it.Passed += e.Passed
		it.Denied += e.Denied
		it.ShadowDenied += e.ShadowDenied
	}
	if full {
		return ErrFull
	}
	return nil
}

func (m *Store) rows() int { return len(m.buckets) + len(m.top) }

// expire drops the minutes past analytics.MinuteRetention.
func (m *Store) expire() {
	for id, at := range m.batches {
		if m.now().Sub(at) > time.Hour {
			delete(m.batches, id)
		}
	}
	cutoff := m.now().Add(-analytics.MinuteRetention).UnixMilli()
	for k := range m.buckets {
		if k.minute < cutoff {
			delete(m.buckets, k)
		}
	}
	for k := range m.top {
		if k.minute < cutoff {
			delete(m.top, k)
		}
	}
}

// Series implements store.Store: minutes, added up into g's buckets.
func (m *Store) Series(_ context.Context, workspace, namespace string, g store.Granularity, from, to time.Time) ([]store.Point, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	size := g.Duration().Milliseconds()
	sums := map[int64]*store.Point{}
	for k, p := range m.buckets {
		if k.workspace != workspace || k.namespace != namespace || k.minute < from.UnixMilli() || k.minute >= to.UnixMilli() {
			continue
		}
		store.AddPoint(sums, k.minute/size*size, p.Passed, p.Denied, p.ShadowDenied)
	}
	return store.SortedPoints(sums), nil
}

// Top implements store.Store.
func (m *Store) Top(_ context.Context, workspace, namespace string, from, to time.Time, n int) ([]store.Identifier, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sums := map[string]*store.Identifier{}
	for k, it := range m.top {
		if k.workspace != workspace || k.namespace != namespace || k.minute < from.UnixMilli() || k.minute >= to.UnixMilli() {
			continue
		}
		store.AddIdentifier(sums, k.identifier, it.Passed, it.Denied, it.ShadowDenied)
	}
	return store.Rank(sums, n), nil
}

// Namespaces implements store.Store.
func (m *Store) Namespaces(_ context.Context, workspace string, from, to time.Time, n int) ([]store.Identifier, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sums := map[string]*store.Identifier{}
	for k, p := range m.buckets {
		if k.workspace != workspace || k.minute < from.UnixMilli() || k.minute >= to.UnixMilli() {
			continue
		}
		store.AddIdentifier(sums, k.namespace, p.Passed, p.Denied, p.ShadowDenied)
	}
	return store.Rank(sums, n), nil
}

// Seen implements store.Fleet.
func (m *Store) Seen(_ context.Context, p store.Process) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p.SeenAt = m.now()
	m.processes = map[string]store.Process{p.ID: p} // only this process reports here
	return nil
}

// Processes implements store.Fleet.
func (m *Store) Processes(_ context.Context, since time.Duration) ([]store.Process, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var out []store.Process
	for _, p := range m.processes {
		if now.Sub(p.SeenAt) <= since {
			out = append(out, p)
		}
	}
	return out, now, nil
}

package analytics

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Memory is a Store and a Fleet in the memory of one process, for a process
// without MySQL: it keeps minutes only (MinuteRetention of them), answers
// coarser granularities by adding them up, and knows only its own process.
// It holds at most maxRows buckets and named identifiers together; past it,
// Add refuses what is new (ErrFull) and keeps what it holds.
type Memory struct {
	mu        sync.Mutex
	now       func() time.Time
	maxRows   int
	buckets   map[memKey]*Point
	top       map[memTopKey]*Identifier
	processes map[string]Process
}

type memKey struct {
	workspace, namespace string
	minute               int64 // unix ms
}

type memTopKey struct {
	memKey
	identifier string
}

// ErrFull is returned by Memory.Add when it holds the most rows it may.
var ErrFull = errors.New("analytics store full")

// DefaultMemoryRows bounds a Memory store: some 100 MiB at most.
const DefaultMemoryRows = 500_000

// NewMemory returns an empty store of at most maxRows rows on the clock now.
func NewMemory(maxRows int, now func() time.Time) *Memory {
	return &Memory{now: now, maxRows: maxRows, buckets: map[memKey]*Point{}, top: map[memTopKey]*Identifier{},
		processes: map[string]Process{}}
}

// Add implements Store.
func (m *Memory) Add(_ context.Context, buckets []Bucket, top []Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	full := false
	for _, b := range buckets {
		k := memKey{b.Workspace, b.Namespace, b.Start.UnixMilli()}
		p, ok := m.buckets[k]
		if !ok {
			if m.rows() >= m.maxRows {
				full = true
				continue
			}
			p = &Point{Start: b.Start}
			m.buckets[k] = p
		}
		p.Passed += b.Passed
		p.Denied += b.Denied
	}
	for _, e := range top {
		k := memTopKey{memKey{e.Workspace, e.Namespace, e.Start.UnixMilli()}, e.Identifier}
		it, ok := m.top[k]
		if !ok {
			if m.rows() >= m.maxRows {
				full = true
				continue
			}
			it = &Identifier{Identifier: e.Identifier}
			m.top[k] = it
		}
		it.Passed += e.Passed
		it.Denied += e.Denied
	}
	if full {
		return ErrFull
	}
	return nil
}

func (m *Memory) rows() int { return len(m.buckets) + len(m.top) }

// expire drops the minutes past MinuteRetention.
func (m *Memory) expire() {
	cutoff := m.now().Add(-MinuteRetention).UnixMilli()
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

// Series implements Store: minutes, added up into g's buckets.
func (m *Memory) Series(_ context.Context, workspace, namespace string, g Granularity, from, to time.Time) ([]Point, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	size := g.Duration().Milliseconds()
	sums := map[int64]*Point{}
	for k, p := range m.buckets {
		if k.workspace != workspace || k.namespace != namespace || k.minute < from.UnixMilli() || k.minute >= to.UnixMilli() {
			continue
		}
		addPoint(sums, k.minute/size*size, p.Passed, p.Denied)
	}
	return sortedPoints(sums), nil
}

// Top implements Store.
func (m *Memory) Top(_ context.Context, workspace, namespace string, from, to time.Time, n int) ([]Identifier, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sums := map[string]*Identifier{}
	for k, it := range m.top {
		if k.workspace != workspace || k.namespace != namespace || k.minute < from.UnixMilli() || k.minute >= to.UnixMilli() {
			continue
		}
		addIdentifier(sums, k.identifier, it.Passed, it.Denied)
	}
	return rank(sums, n), nil
}

// Namespaces implements Store.
func (m *Memory) Namespaces(_ context.Context, workspace string, from, to time.Time, n int) ([]Identifier, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sums := map[string]*Identifier{}
	for k, p := range m.buckets {
		if k.workspace != workspace || k.minute < from.UnixMilli() || k.minute >= to.UnixMilli() {
			continue
		}
		addIdentifier(sums, k.namespace, p.Passed, p.Denied)
	}
	return rank(sums, n), nil
}

// Seen implements Fleet.
func (m *Memory) Seen(_ context.Context, p Process) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p.SeenAt = m.now()
	m.processes = map[string]Process{p.ID: p} // only this process reports here
	return nil
}

// Processes implements Fleet.
func (m *Memory) Processes(_ context.Context, since time.Duration) ([]Process, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var out []Process
	for _, p := range m.processes {
		if now.Sub(p.SeenAt) <= since {
			out = append(out, p)
		}
	}
	return out, now, nil
}

// addPoint adds passed and denied to the point of sums that starts at
// start (unix ms), creating it.
func addPoint(sums map[int64]*Point, start, passed, denied int64) {
	p, ok := sums[start]
	if !ok {
		p = &Point{Start: time.UnixMilli(start)}
		sums[start] = p
	}
	p.Passed += passed
	p.Denied += denied
}

// addIdentifier adds passed and denied to key's entry of sums, creating it.
func addIdentifier(sums map[string]*Identifier, key string, passed, denied int64) {
	it, ok := sums[key]
	if !ok {
		it = &Identifier{Identifier: key}
		sums[key] = it
	}
	it.Passed += passed
	it.Denied += denied
}

// sortedPoints returns the points of sums, oldest first.
func sortedPoints(sums map[int64]*Point) []Point {
	out := make([]Point, 0, len(sums))
	for _, p := range sums {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Point) int { return a.Start.Compare(b.Start) })
	return out
}

// rank returns up to n identifiers of sums, the most denied first, then the
// busiest, then by name.
func rank(sums map[string]*Identifier, n int) []Identifier {
	out := make([]Identifier, 0, len(sums))
	for _, it := range sums {
		out = append(out, *it)
	}
	slices.SortFunc(out, func(a, b Identifier) int {
		return cmp.Or(cmp.Compare(b.Denied, a.Denied), cmp.Compare(b.Passed+b.Denied, a.Passed+a.Denied),
			cmp.Compare(a.Identifier, b.Identifier))
	})
	return out[:min(n, len(out))]
}

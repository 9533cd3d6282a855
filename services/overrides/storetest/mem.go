package storetest

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/unkeyed/ratelimit/services/overrides/store"
)

// Mem is an in-memory [store.Overrides] with the semantics of package
// mysqlstore: one row per workspace, namespace and identifier, compared
// byte for byte; a deletion keeps the row as a tombstone; every change
// takes a revision from the store's own clock, larger than the row's last;
// pages follow the order rows were created in. Its clock counts changes,
// so revisions are small integers and UpdatedAt is that count in ms. Its
// methods are safe for concurrent use; the zero value is ready.
type Mem struct {
	mu    sync.Mutex
	rows  map[memKey]*memRow
	clock int64 // the latest revision given
	pks   int64 // the latest position given
}

type memKey struct{ workspace, namespace, identifier string }

type memRow struct {
	change store.Change
	pk     int64
}

// Set implements [store.Overrides].
func (m *Mem) Set(ctx context.Context, o store.Override) (store.Change, error) {
	if err := ctx.Err(); err != nil {
		return store.Change{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := memKey{o.Workspace, o.Namespace, o.Identifier}
	r := m.rows[k]
	if r == nil {
		if m.rows == nil {
			m.rows = map[memKey]*memRow{}
		}
		m.pks++
		r = &memRow{pk: m.pks}
		m.rows[k] = r
	} else if !r.change.Deleted {
		o.ID = r.change.ID // an override that exists keeps its id
	}
	m.clock++
	o.UpdatedAt = m.clock
	r.change = store.Change{Override: o, Revision: m.clock}
	return r.change, nil
}

// Get implements [store.Overrides].
func (m *Mem) Get(ctx context.Context, workspace, namespace, identifier string) (store.Override, error) {
	if err := ctx.Err(); err != nil {
		return store.Override{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rows[memKey{workspace, namespace, identifier}]
	if r == nil || r.change.Deleted {
		return store.Override{}, store.ErrNotFound
	}
	return r.change.Override, nil
}

// List implements [store.Overrides].
func (m *Mem) List(ctx context.Context, workspace, namespace, after string, limit int) ([]store.Override, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Override
	for k, r := range m.rows {
		if k.workspace == workspace && k.namespace == namespace && k.identifier > after && !r.change.Deleted {
			out = append(out, r.change.Override)
		}
	}
	slices.SortFunc(out, func(a, b store.Override) int { return cmp.Compare(a.Identifier, b.Identifier) })
	return out[:min(len(out), max(limit, 0))], nil
}

// Delete implements [store.Overrides].
func (m *Mem) Delete(ctx context.Context, workspace, namespace, identifier string) (store.Change, error) {
	if err := ctx.Err(); err != nil {
		return store.Change{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rows[memKey{workspace, namespace, identifier}]
	if r == nil || r.change.Deleted {
		return store.Change{}, store.ErrNotFound
	}
	m.clock++
	r.change.Deleted = true
	r.change.Revision = m.clock
	return r.change, nil
}

// Revision implements [store.Overrides]: the next change takes a larger
// one.
func (m *Mem) Revision(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.clock + 1, nil
}

// Changes implements [store.Overrides].
func (m *Mem) Changes(ctx context.Context, since int64) ([]store.Change, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Change
	for _, r := range m.rows {
		if r.change.Revision >= since {
			out = append(out, r.change)
		}
	}
	slices.SortFunc(out, func(a, b store.Change) int { return cmp.Compare(a.Revision, b.Revision) })
	return out, nil
}

// Page implements [store.Overrides]: live overrides in the order their
// rows were created.
func (m *Mem) Page(ctx context.Context, after int64, limit int) ([]store.Change, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, after, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var rows []*memRow
	for _, r := range m.rows {
		if r.pk > after && !r.change.Deleted {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b *memRow) int { return cmp.Compare(a.pk, b.pk) })
	rows = rows[:min(len(rows), max(limit, 0))]
	out := make([]store.Change, len(rows))
	last := after
	for i, r := range rows {
		out[i], last = r.change, r.pk
	}
	return out, last, nil
}

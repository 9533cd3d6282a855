// Package memstore keeps overrides in this process's memory: the store of
// a process without MySQL (the embedded default), as vfs.NewMem is a file
// system in memory beside the real one. It has the semantics of package
// mysqlstore (see [store.Overrides]): one row per workspace, namespace and
// identifier, compared byte for byte; a deletion keeps the row as a
// tombstone for a while; every change takes a revision from the store's own
// clock, in µs, larger than any before; pages follow the order rows were
// created in.
package memstore

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/unkeyed/ratelimit/services/overrides/store"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// TombstoneMemory is how long the store keeps a deleted override's row:
// every reader of its changes is in this process and polls within seconds,
// so it needs far less than the MySQL store's day, and a caller that
// creates and deletes overrides cannot grow memory beyond what it does in
// this long.
const TombstoneMemory = 10 * time.Minute

// Store is an in-memory [store.Overrides]. Its methods are safe for
// concurrent use; a Store must be made with [New].
type Store struct {
	clock ratelimit.Clock

	mu sync.Mutex
	// rows holds every row, live or tombstone; scopes the same rows by
	// workspace and namespace, for List.
	rows   map[key]*row
	scopes map[store.Scope]map[string]*row
	// log holds a row at each revision it took, in revision order, for
	// Changes; entries of rows that changed again since are skipped, and
	// dropped when the log is compacted.
	log []entry
	// compacted is the log's length after its last compaction: it is
	// compacted again when it has doubled, so each change costs O(1).
	compacted int
	// tombstones holds the deletions in revision order, to purge them
	// TombstoneMemory later.
	tombstones []entry
	revision   int64 // the latest given
	pks        int64 // the latest position given
}

type key struct{ workspace, namespace, identifier string }

type row struct {
	change store.Change
	pk     int64
}

type entry struct {
	revision int64
	row      *row
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock of revisions and UpdatedAt (the wall clock by
// default).
func WithClock(c ratelimit.Clock) Option { return func(s *Store) { s.clock = c } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{clock: ratelimit.SystemClock{}, rows: map[key]*row{}, scopes: map[store.Scope]map[string]*row{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// next gives the next revision, with s.mu held: the clock in µs, or one
// more than the last if the clock has not moved on.
func (s *Store) next() (revision, ms int64) {
	now := s.clock.Now()
	s.revision = max(s.revision+1, now.UnixMicro())
	return s.revision, now.UnixMilli()
}

// changed logs r at its new revision, with s.mu held, purges the
// tombstones past TombstoneMemory, and compacts the log when it has
// doubled since it last was.
func (s *Store) changed(r *row) {
	s.log = append(s.log, entry{r.change.Revision, r})
	if r.change.Deleted {
		s.tombstones = append(s.tombstones, entry{r.change.Revision, r})
	}
	horizon := s.revision - TombstoneMemory.Microseconds()
	n := 0
	for ; n < len(s.tombstones) && s.tombstones[n].revision < horizon; n++ {
		if t := s.tombstones[n]; t.row.change.Revision == t.revision {
			s.drop(t.row) // still the tombstone it was
		}
	}
	s.tombstones = slices.Delete(s.tombstones, 0, n)
	if len(s.log) < 2*s.compacted+64 {
		return
	}
	live := s.log[:0]
	for _, e := range s.log {
		// Keep a row's latest state, unless it was purged.
		if e.row.change.Revision == e.revision && s.rows[e.row.key()] == e.row {
			live = append(live, e)
		}
	}
	clear(s.log[len(live):])
	s.log = live
	s.compacted = len(live)
}

func (r *row) key() key {
	return key{r.change.Workspace, r.change.Namespace, r.change.Identifier}
}

// drop forgets a row, with s.mu held.
func (s *Store) drop(r *row) {
	o := r.change.Override
	delete(s.rows, r.key())
	sc := store.Scope{Workspace: o.Workspace, Namespace: o.Namespace}
	delete(s.scopes[sc], o.Identifier)
	if len(s.scopes[sc]) == 0 {
		delete(s.scopes, sc)
	}
}

// Set implements [store.Overrides].
func (s *Store) Set(ctx context.Context, o store.Override) (store.Change, error) {
	if err := ctx.Err(); err != nil {
		return store.Change{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{o.Workspace, o.Namespace, o.Identifier}
	r := s.rows[k]
	if r == nil {
		s.pks++
		r = &row{pk: s.pks}
		s.rows[k] = r
		sc := store.Scope{Workspace: o.Workspace, Namespace: o.Namespace}
		if s.scopes[sc] == nil {
			s.scopes[sc] = map[string]*row{}
		}
		s.scopes[sc][o.Identifier] = r
	} else if !r.change.Deleted {
		o.ID = r.change.ID // an override that exists keeps its id
	}
	revision, ms := s.next()
	o.UpdatedAt = ms
	r.change = store.Change{Override: o, Revision: revision}
	s.changed(r)
	return r.change, nil
}

// Get implements [store.Overrides].
func (s *Store) Get(ctx context.Context, workspace, namespace, identifier string) (store.Override, error) {
	if err := ctx.Err(); err != nil {
		return store.Override{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[key{workspace, namespace, identifier}]
	if r == nil || r.change.Deleted {
		return store.Override{}, store.ErrNotFound
	}
	return r.change.Override, nil
}

// List implements [store.Overrides]. It sorts the namespace's
// identifiers after the given one: byte order, as the MySQL store's binary
// collation sorts.
func (s *Store) List(ctx context.Context, workspace, namespace, after string, limit int) ([]store.Override, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Override
	for id, r := range s.scopes[store.Scope{Workspace: workspace, Namespace: namespace}] {
		if id > after && !r.change.Deleted {
			out = append(out, r.change.Override)
		}
	}
	slices.SortFunc(out, func(a, b store.Override) int { return cmp.Compare(a.Identifier, b.Identifier) })
	return out[:min(len(out), max(limit, 0))], nil
}

// Delete implements [store.Overrides].
func (s *Store) Delete(ctx context.Context, workspace, namespace, identifier string) (store.Change, error) {
	if err := ctx.Err(); err != nil {
		return store.Change{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[key{workspace, namespace, identifier}]
	if r == nil || r.change.Deleted {
		return store.Change{}, store.ErrNotFound
	}
	r.change.Deleted = true
	r.change.Revision, r.change.UpdatedAt = s.next()
	s.changed(r)
	return r.change, nil
}

// Revision implements [store.Overrides]: the next change takes a larger
// one.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.revision+1, s.clock.Now().UnixMicro()), nil
}

// Changes implements [store.Overrides]: a binary search of the log, so
// that a poll that finds nothing costs next to nothing.
func (s *Store) Changes(ctx context.Context, since int64) ([]store.Change, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.log, since, func(e entry, since int64) int { return cmp.Compare(e.revision, since) })
	var out []store.Change
	for _, e := range s.log[i:] {
		if e.row.change.Revision == e.revision && s.rows[e.row.key()] == e.row {
			out = append(out, e.row.change)
		}
	}
	return out, nil
}

// Page implements [store.Overrides]: live overrides in the order their
// rows were created.
func (s *Store) Page(ctx context.Context, after int64, limit int) ([]store.Change, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, after, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []*row
	for _, r := range s.rows {
		if r.pk > after && !r.change.Deleted {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b *row) int { return cmp.Compare(a.pk, b.pk) })
	rows = rows[:min(len(rows), max(limit, 0))]
	out := make([]store.Change, len(rows))
	last := after
	for i, r := range rows {
		out[i], last = r.change, r.pk
	}
	return out, last, nil
}

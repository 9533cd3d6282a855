package overrides

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/unkeyed/ratelimit/services/overrides/store"
)

// index is a process's copy of every override, for lookups without I/O.
// A change of one override costs a map update, and for a pattern a new
// index of its namespace's patterns (at most DefaultMaxPatternsPerNamespace
// of them, unless configured otherwise): never a rebuild of its namespace's
// exact overrides or a copy of all namespaces. Its methods are safe for concurrent
// use; puzpuzpuz/xsync's map is a well-kept concurrent hash map whose reads
// take no lock, which a lookup on every decision needs.
type index struct {
	// entries holds every override and the tombstones of recent deletions,
	// exact identifiers and patterns alike. An *entry is never changed once
	// stored (but for its seen mark): a change stores a new one.
	entries *xsync.Map[key, *entry]
	// patterns holds the live patterns of each namespace that has any.
	patterns *xsync.Map[store.Scope, *patternSet]
	// perWorkspace counts each workspace's live overrides, for the cap.
	perWorkspace *xsync.Map[string, *atomic.Int64]
	// live, livePatterns and liveSwitches count the live overrides,
	// patterns and namespace switches: a lookup with none to find returns
	// at once.
	live, livePatterns, liveSwitches atomic.Int64

	// tombstones lists the deletions applied, oldest first, to forget them
	// once no older state can arrive any more (see forget).
	tombMu     sync.Mutex
	tombstones []tombstone
}

// key names one override.
type key struct{ workspace, namespace, identifier string }

type entry struct {
	o        Override
	revision int64
	deleted  bool
	// seen is the generation of the latest full load that read the entry
	// (see index.dropUnseen).
	seen atomic.Uint32
}

type tombstone struct {
	k        key
	revision int64
}

// patternSet is the live patterns of one namespace. index is what lookups
// read; it is replaced, never changed, under mu.
type patternSet struct {
	mu       sync.Mutex
	byID     map[string]*Override
	floating int // how many of byID have no literal prefix or suffix
	index    atomic.Pointer[patternIndex]
}

func newIndex() *index {
	return &index{
		entries:      xsync.NewMap[key, *entry](),
		patterns:     xsync.NewMap[store.Scope, *patternSet](),
		perWorkspace: xsync.NewMap[string, *atomic.Int64](),
	}
}

// lookup returns the override that applies to identifier: its exact
// override, else the most specific matching pattern.
func (x *index) lookup(workspace, namespace, identifier string) (Override, bool) {
	if x.live.Load() == 0 {
		return Override{}, false
	}
	if e, ok := x.entries.Load(key{workspace, namespace, identifier}); ok && !e.deleted {
		return e.o, true
	}
	if x.livePatterns.Load() == 0 {
		return Override{}, false
	}
	ps, ok := x.patterns.Load(store.Scope{Workspace: workspace, Namespace: namespace})
	if !ok {
		return Override{}, false
	}
	pi := ps.index.Load()
	if pi == nil {
		return Override{}, false
	}
	if o := pi.lookup(identifier); o != nil {
		return *o, true
	}
	return Override{}, false
}

// namespaceSwitch returns the live namespace switch of a namespace.
func (x *index) namespaceSwitch(workspace, namespace string) (Override, bool) {
	if x.liveSwitches.Load() == 0 {
		return Override{}, false
	}
	if e, ok := x.entries.Load(key{workspace, namespace, NamespaceSwitch}); ok && !e.deleted {
		return e.o, true
	}
	return Override{}, false
}

// get returns the entry of an override held in memory, live or a tombstone.
func (x *index) get(workspace, namespace, identifier string) (*entry, bool) {
	return x.entries.Load(key{workspace, namespace, identifier})
}

// count returns how many live overrides a workspace holds.
func (x *index) count(workspace string) int64 {
	if n, ok := x.perWorkspace.Load(workspace); ok {
		return n.Load()
	}
	return 0
}

// apply records c unless memory holds the same or a later state of the
// override, and reports whether it did. gen, if not zero, marks the entry
// seen by that full load whether or not c was newer. A pattern's
// namespace index is updated at once unless deferPatterns is set; the
// caller then calls syncPatterns for the scopes (store.Scope) it touched.
func (x *index) apply(c *Change, gen uint32, deferPatterns bool) bool {
	k := key{c.Workspace, c.Namespace, c.Identifier}
	applied := false
	x.entries.Compute(k, func(old *entry, loaded bool) (*entry, xsync.ComputeOp) {
		if loaded && old.revision >= c.Revision {
			if gen != 0 {
				old.seen.Store(gen)
			}
			return old, xsync.CancelOp
		}
		applied = true
		e := &entry{o: c.Override, revision: c.Revision, deleted: c.Deleted}
		e.seen.Store(gen)
		if loaded {
			e.seen.Store(max(gen, old.seen.Load()))
		}
		wasLive := loaded && !old.deleted
		x.countChange(k, wasLive, !c.Deleted)
		return e, xsync.UpdateOp
	})
	if !applied {
		return false
	}
	if c.Deleted {
		x.tombMu.Lock()
		x.tombstones = append(x.tombstones, tombstone{k: k, revision: c.Revision})
		x.tombMu.Unlock()
	}
	if isPattern(c.Identifier) && !deferPatterns {
		x.syncPattern(k)
	}
	return true
}

// countChange adjusts the live counts for k going from wasLive to isLive.
// It runs inside the entry's Compute, so the changes of one override are
// counted in the order they were applied.
func (x *index) countChange(k key, wasLive, isLive bool) {
	var d int64
	switch {
	case isLive && !wasLive:
		d = 1
	case wasLive && !isLive:
		d = -1
	default:
		return
	}
	x.live.Add(d)
	if isPattern(k.identifier) {
		x.livePatterns.Add(d)
	}
	if k.identifier == NamespaceSwitch {
		x.liveSwitches.Add(d)
	}
	n, _ := x.perWorkspace.LoadOrCompute(k.workspace, func() (*atomic.Int64, bool) { return new(atomic.Int64), false })
	n.Add(d)
}

// patternSetOf returns the pattern set of sc, creating it empty.
func (x *index) patternSetOf(sc store.Scope) *patternSet {
	ps, _ := x.patterns.LoadOrCompute(sc, func() (*patternSet, bool) {
		return &patternSet{byID: map[string]*Override{}}, false
	})
	return ps
}

// syncPattern brings the pattern set of k's namespace in line with k's
// entry and publishes a new index of it. It reads the entry under the
// set's lock, so whichever of two racing changes syncs last leaves the
// latest state.
func (x *index) syncPattern(k key) {
	x.syncPatterns(store.Scope{Workspace: k.workspace, Namespace: k.namespace}, []string{k.identifier})
}

// syncPatterns is syncPattern for many patterns of one namespace, with one
// new index for them all, as a bulk load needs.
func (x *index) syncPatterns(sc store.Scope, identifiers []string) {
	ps := x.patternSetOf(sc)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, id := range identifiers {
		if old := ps.byID[id]; old != nil && compilePattern(old).floating() {
			ps.floating--
		}
		if e, ok := x.entries.Load(key{sc.Workspace, sc.Namespace, id}); ok && !e.deleted {
			o := e.o
			ps.byID[id] = &o
			if compilePattern(&o).floating() {
				ps.floating++
			}
		} else {
			delete(ps.byID, id)
		}
	}
	ps.index.Store(newPatternIndex(ps.byID))
}

// patternCounts returns how many live patterns a namespace holds, and how
// many of them are floating.
func (x *index) patternCounts(workspace, namespace string) (all, floating int) {
	ps, ok := x.patterns.Load(store.Scope{Workspace: workspace, Namespace: namespace})
	if !ok {
		return 0, 0
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.byID), ps.floating
}

// forget drops the tombstones of deletions with a revision below before:
// by then no poll can still return an older state of their overrides.
func (x *index) forget(before int64) {
	x.tombMu.Lock()
	n := 0
	for n < len(x.tombstones) && x.tombstones[n].revision < before {
		n++
	}
	old := x.tombstones[:n]
	x.tombstones = slices.Delete(x.tombstones, 0, n)
	x.tombMu.Unlock()
	for _, t := range old {
		x.entries.Compute(t.k, func(e *entry, loaded bool) (*entry, xsync.ComputeOp) {
			if loaded && e.deleted && e.revision == t.revision {
				return nil, xsync.DeleteOp
			}
			return e, xsync.CancelOp
		})
	}
}

// dropUnseen deletes the live overrides with a revision below before that
// the full load of generation gen did not read: the store no longer holds
// them (their tombstones were purged while this process was not polling).
func (x *index) dropUnseen(gen uint32, before int64) (dropped int) {
	var gone []key
	x.entries.Range(func(k key, e *entry) bool {
		if !e.deleted && e.seen.Load() != gen && e.revision < before {
			gone = append(gone, k)
		}
		return true
	})
	for _, k := range gone {
		c := Change{Override: Override{Workspace: k.workspace, Namespace: k.namespace, Identifier: k.identifier}, Deleted: true}
		if e, ok := x.entries.Load(k); ok {
			c.Revision = e.revision + 1
			if x.apply(&c, 0, false) {
				dropped++
			}
		}
	}
	return dropped
}

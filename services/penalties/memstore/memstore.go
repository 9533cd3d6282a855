// Package memstore keeps penalty boxes in this process's memory: the store
// of a process without MySQL (the embedded default). It has the semantics
// of package mysqlstore (see [store.Penalties]): one box per key, compared
// byte for byte, merged never replaced, written at the store's own clock.
package memstore

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/unkeyed/ratelimit/services/penalties/store"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Store is an in-memory [store.Penalties]. Its methods are safe for
// concurrent use; a Store must be made with [New].
type Store struct {
	clock ratelimit.Clock

	mu     sync.Mutex
	boxes  map[store.Key]*box
	merges int64
}

type box struct {
	b       store.Block
	written int64 // the store's clock at the latest merge
	order   int64 // the latest merge's place among all: the latest first
	// expires is the latest any write said the box matters until, as
	// MySQL's expires_at: a lift keeps the box it lifted readable until
	// the lifted block would have stopped mattering.
	expires int64
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the store's clock (the wall clock by default).
func WithClock(c ratelimit.Clock) Option { return func(s *Store) { s.clock = c } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{clock: ratelimit.SystemClock{}, boxes: map[store.Key]*box{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Merge merges b into its key's box, and forgets the boxes that stopped
// mattering, so that memory holds only what could still block.
func (s *Store) Merge(_ context.Context, b store.Block) error {
	now := s.clock.Now().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.boxes[b.Key]
	if !ok {
		x = &box{b: store.Block{Key: b.Key}}
		s.boxes[b.Key] = x
	}
	s.merges++
	x.b, x.written, x.order = store.Merge(x.b, b), now, s.merges
	x.expires = max(x.expires, b.Expires(), b.Cleared)
	if len(s.boxes)%64 == 0 {
		for k, x := range s.boxes {
			if x.expires <= now {
				delete(s.boxes, k)
			}
		}
	}
	return nil
}

// Get returns the box of k.
func (s *Store) Get(_ context.Context, k store.Key) (store.Block, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x, ok := s.boxes[k]; ok {
		return x.b, nil
	}
	return store.Block{}, store.ErrNotFound
}

// List returns a page of a namespace's boxes whose block has not ended.
func (s *Store) List(_ context.Context, workspace, namespace, after string, now int64, limit int) ([]store.Block, error) {
	s.mu.Lock()
	var out []store.Block
	for k, x := range s.boxes {
		if k.Workspace == workspace && k.Namespace == namespace && k.Identifier > after && x.b.Until > now {
			out = append(out, x.b)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b store.Block) int { return cmp.Compare(a.Identifier, b.Identifier) })
	return out[:min(len(out), limit)], nil
}

// Changes returns up to limit boxes written at since or later that
// matter at now, the latest written first.
func (s *Store) Changes(_ context.Context, since, now int64, limit int) ([]store.Block, int64, error) {
	clock := s.clock.Now().UnixMilli()
	s.mu.Lock()
	var out []box
	for _, x := range s.boxes {
		if x.written >= since && x.expires > now {
			out = append(out, *x)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b box) int { return cmp.Compare(b.order, a.order) })
	blocks := make([]store.Block, min(len(out), max(limit, 0)))
	for i := range blocks {
		blocks[i] = out[i].b
	}
	return blocks, clock, nil
}

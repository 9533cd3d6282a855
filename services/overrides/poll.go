package overrides

import (
	"context"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/services/overrides/store"
)

// Load reads every live override from the store in pages of loadPageSize,
// checking ctx between pages, so that a process told to stop while loading
// a million overrides stops within one statement. Changes made meanwhile
// are read by the next poll, which starts where the load began.
func (s *Registry) Load(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load(ctx)
}

// load is Load with s.mu held.
func (s *Registry) load(ctx context.Context) error {
	start := time.Now()
	began, err := s.revision(ctx)
	if err != nil {
		return fmt.Errorf("load overrides: %w", err)
	}
	s.gen++
	gen := s.gen
	var after int64
	rows := 0
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("load overrides: stopped after %d: %w", rows, err)
		}
		pageCtx, cancel := context.WithTimeout(ctx, storeTimeout)
		page, last, err := s.pollStore.Page(pageCtx, after, loadPageSize)
		cancel()
		if err != nil {
			return fmt.Errorf("load overrides after %d: %w", rows, err)
		}
		s.applyAll(page, gen)
		rows += len(page)
		after = last
		if len(page) < loadPageSize {
			break
		}
	}
	// What the load did not read is gone from the store: a reload after a
	// long outage, when the tombstones of some deletions were purged.
	dropped := s.idx.dropUnseen(gen, began-pollLookback.Microseconds())
	s.polled = began
	s.metrics.loadSeconds.Set(time.Since(start).Seconds())
	s.logger.Info("overrides loaded", "overrides", rows, "dropped", dropped, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// applyAll applies changes, sorting each touched namespace's patterns once.
func (s *Registry) applyAll(changes []Change, gen uint32) {
	var touched map[store.Scope][]string
	for i := range changes {
		c := &changes[i]
		s.applied(s.idx.apply(c, gen, true))
		if isPattern(c.Identifier) {
			if touched == nil {
				touched = map[store.Scope][]string{}
			}
			sc := store.Scope{Workspace: c.Workspace, Namespace: c.Namespace}
			touched[sc] = append(touched[sc], c.Identifier)
		}
	}
	for sc, ids := range touched {
		s.idx.syncPatterns(sc, ids)
	}
}

// revision reads the store's revision clock within clockTimeout: the
// first statement of every load and poll, it tells whether the store
// answers at all.
func (s *Registry) revision(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, clockTimeout)
	defer cancel()
	return s.pollStore.Revision(ctx)
}

// Run polls the store for changes every poll interval until ctx is done,
// then returns nil. A poll that fails keeps what the process has and is
// tried again at the next interval; so is a start-up load that did not
// complete. On the
// in-memory store a poll finds only this process's own changes, which
// memory holds already, at the cost of a binary search.
func (s *Registry) Run(ctx context.Context) error {
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := s.Refresh(ctx); err != nil {
				s.logger.Warn("poll overrides", "error", err)
			}
		}
	}
}

// Refresh applies the store's changes since the latest successful poll
// began, less pollLookback (reconcileLookback every reconcileEvery), by
// the store's clock. Before a load has
// completed, or when the latest poll is older than half of
// TombstoneRetention, it loads everything instead.
func (s *Registry) Refresh(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.polled == 0 {
		return s.load(ctx)
	}
	began, err := s.revision(ctx)
	if err != nil {
		return fmt.Errorf("poll overrides: %w", err)
	}
	if began-s.polled > (TombstoneRetention / 2).Microseconds() {
		return s.load(ctx)
	}
	since := s.polled - pollLookback.Microseconds()
	reconcile := began-s.reconciled >= reconcileEvery.Microseconds()
	if reconcile {
		since = s.polled - reconcileLookback.Microseconds()
	}
	pollCtx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	changes, err := s.pollStore.Changes(pollCtx, since)
	if err != nil {
		return fmt.Errorf("poll overrides: %w", err)
	}
	s.applyAll(changes, 0)
	s.polled = began
	if reconcile {
		s.reconciled = began
	}
	s.idx.forget(began - tombstoneMemory.Microseconds())
	return nil
}

package overrides

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Store keeps overrides where every process of the fleet can read them.
type Store interface {
	// Set creates or replaces the override of o's identifier and returns it
	// as stored: an existing override keeps its id, a new one takes o.ID.
	Set(ctx context.Context, o Override) (Override, error)
	// Get returns the override of an identifier or pattern, or ErrNotFound.
	Get(ctx context.Context, workspace, namespace, identifier string) (Override, error)
	// List returns up to limit overrides of a namespace whose identifier
	// sorts after the given one, in identifier order.
	List(ctx context.Context, workspace, namespace, after string, limit int) ([]Override, error)
	// Delete deletes the override of an identifier or pattern at now (unix
	// ms), or returns ErrNotFound.
	Delete(ctx context.Context, workspace, namespace, identifier string, now int64) error
	// Changes returns every override set or deleted at or after since (unix
	// ms).
	Changes(ctx context.Context, since int64) ([]Change, error)
}

// Change is an override as a poll sees it: set, or deleted.
type Change struct {
	Override
	Deleted bool
}

// Defaults of a [Service].
const (
	// DefaultPollInterval is how often [Service.Run] reads the store's
	// changes: a change made on one process reaches every other within
	// about this long. One statement a poll; at two seconds an idle API
	// process sends MySQL 1.5 statements a second with the global sync's
	// one.
	DefaultPollInterval = 2 * time.Second
	// pollLookback widens every poll back in time, as the global sync's
	// does: a change is stamped by its writer's clock when its statement
	// runs and becomes visible when it commits.
	pollLookback = 5 * time.Second
	// MaxListLimit is the largest page [Service.List] returns.
	MaxListLimit = 100
	// DefaultListLimit is the page size when none is asked for.
	DefaultListLimit = 10
)

// Service holds every override in memory for [Service.Lookup] and writes
// through to its store. Its methods are safe for concurrent use.
type Service struct {
	store  Store // nil: this process's memory only
	clock  ratelimit.Clock
	logger *slog.Logger
	poll   time.Duration

	// mu serializes writers of entries and the index.
	mu      sync.Mutex
	entries map[scope]map[string]Change // every override and tombstone, by scope and identifier
	index   atomic.Pointer[map[scope]*scopeIndex]
	polled  int64 // unix ms at which the latest successful poll began; 0 before
}

// scope is the workspace and namespace an override belongs to.
type scope struct{ workspace, namespace string }

// scopeIndex is the lookup structure of one scope. It is never changed once
// published: a change publishes a new one.
type scopeIndex struct {
	exact    map[string]*Override
	patterns []*Override // most specific first
}

// Option configures a [Service].
type Option func(*Service)

// WithStore keeps overrides in store (shared by the fleet) instead of this
// process's memory alone.
func WithStore(store Store) Option { return func(s *Service) { s.store = store } }

// WithClock sets the clock that stamps changes.
func WithClock(clock ratelimit.Clock) Option { return func(s *Service) { s.clock = clock } }

// WithLogger sets the logger of the poll loop.
func WithLogger(logger *slog.Logger) Option { return func(s *Service) { s.logger = logger } }

// WithPollInterval sets how often [Service.Run] polls the store.
func WithPollInterval(d time.Duration) Option {
	return func(s *Service) {
		if d > 0 {
			s.poll = d
		}
	}
}

// New returns a service. It starts nothing.
func New(opts ...Option) *Service {
	s := &Service{
		clock:   systemClock{},
		logger:  slog.New(slog.DiscardHandler),
		poll:    DefaultPollInterval,
		entries: map[scope]map[string]Change{},
	}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Lookup returns the override that applies to identifier in a workspace's
// namespace: its exact override, else the most specific matching pattern.
// It reads memory only.
func (s *Service) Lookup(workspace, namespace, identifier string) (Override, bool) {
	idx := s.index.Load()
	if idx == nil {
		return Override{}, false
	}
	sc := (*idx)[scope{workspace, namespace}]
	if sc == nil {
		return Override{}, false
	}
	if o := sc.exact[identifier]; o != nil {
		return *o, true
	}
	for _, o := range sc.patterns {
		if match(o.Identifier, identifier) {
			return *o, true
		}
	}
	return Override{}, false
}

// Set creates or replaces the override of o's identifier (or pattern). It
// returns a [*ratelimit.ValidationError] for an override that breaks a rule.
// The override applies on this process at once, and on the others within
// their poll interval.
func (s *Service) Set(ctx context.Context, o Override) (Override, error) {
	if err := o.Validate(); err != nil {
		return Override{}, err
	}
	o.UpdatedAt = s.clock.Now().UnixMilli()
	if o.ID == "" {
		o.ID = newID()
	}
	if s.store != nil {
		stored, err := s.store.Set(ctx, o)
		if err != nil {
			return Override{}, fmt.Errorf("set override: %w", err)
		}
		o = stored
	} else if old, ok := s.current(o.Workspace, o.Namespace, o.Identifier); ok {
		o.ID = old.ID
	}
	s.apply(Change{Override: o})
	return o, nil
}

// Get returns the override of an identifier (or pattern), or ErrNotFound.
func (s *Service) Get(ctx context.Context, workspace, namespace, identifier string) (Override, error) {
	if err := ValidateKey(namespace, identifier); err != nil {
		return Override{}, err
	}
	if s.store != nil {
		return s.store.Get(ctx, workspace, namespace, identifier)
	}
	if o, ok := s.current(workspace, namespace, identifier); ok {
		return o, nil
	}
	return Override{}, ErrNotFound
}

// List returns up to limit (1 to MaxListLimit; 0 means DefaultListLimit)
// overrides of a namespace whose identifier sorts after the given one, in
// identifier order, and whether more follow.
func (s *Service) List(ctx context.Context, workspace, namespace, after string, limit int) ([]Override, bool, error) {
	if err := ValidateKey(namespace, "x"); err != nil {
		return nil, false, err
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, false, &ratelimit.ValidationError{Field: "limit", Rule: fmt.Sprintf("must be between 1 and %d", MaxListLimit)}
	}
	var out []Override
	if s.store != nil {
		var err error
		if out, err = s.store.List(ctx, workspace, namespace, after, limit+1); err != nil {
			return nil, false, fmt.Errorf("list overrides: %w", err)
		}
	} else {
		s.mu.Lock()
		for id, c := range s.entries[scope{workspace, namespace}] {
			if !c.Deleted && id > after {
				out = append(out, c.Override)
			}
		}
		s.mu.Unlock()
		// Byte order, as the store's binary collation sorts.
		slices.SortFunc(out, func(a, b Override) int { return strings.Compare(a.Identifier, b.Identifier) })
		out = out[:min(len(out), limit+1)]
	}
	more := len(out) > limit
	return out[:min(len(out), limit)], more, nil
}

// Delete deletes the override of an identifier (or pattern), or returns
// ErrNotFound.
func (s *Service) Delete(ctx context.Context, workspace, namespace, identifier string) error {
	if err := ValidateKey(namespace, identifier); err != nil {
		return err
	}
	now := s.clock.Now().UnixMilli()
	old, found := s.current(workspace, namespace, identifier)
	if s.store != nil {
		if err := s.store.Delete(ctx, workspace, namespace, identifier, now); err != nil {
			return err
		}
	} else if !found {
		return ErrNotFound
	}
	old.Workspace, old.Namespace, old.Identifier, old.UpdatedAt = workspace, namespace, identifier, now
	s.apply(Change{Override: old, Deleted: true})
	return nil
}

// current returns the live override of an identifier held in memory.
func (s *Service) current(workspace, namespace, identifier string) (Override, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.entries[scope{workspace, namespace}][identifier]
	return c.Override, ok && !c.Deleted
}

// Run polls the store for changes every poll interval until ctx is done.
// Without a store it returns at once. A poll that fails keeps what the
// process has and is tried again at the next interval.
func (s *Service) Run(ctx context.Context) error {
	if s.store == nil {
		return nil
	}
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if err := s.Refresh(ctx); err != nil {
				s.logger.Warn("poll overrides", "error", err)
			}
		}
	}
}

// Refresh applies the store's changes since the latest successful poll
// (all of them on the first).
func (s *Service) Refresh(ctx context.Context) error {
	if s.store == nil {
		return nil
	}
	start := s.clock.Now().UnixMilli()
	s.mu.Lock()
	since := s.polled
	s.mu.Unlock()
	if since > 0 {
		since -= pollLookback.Milliseconds()
	}
	changes, err := s.store.Changes(ctx, since)
	if err != nil {
		return fmt.Errorf("read override changes: %w", err)
	}
	for _, c := range changes {
		s.apply(c)
	}
	s.mu.Lock()
	s.polled = start
	s.mu.Unlock()
	return nil
}

// apply records c unless memory already holds a later change of the same
// override, and publishes the scope's new index.
func (s *Service) apply(c Change) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := scope{c.Workspace, c.Namespace}
	byID := s.entries[sc]
	if byID == nil {
		byID = map[string]Change{}
		s.entries[sc] = byID
	}
	if old, ok := byID[c.Identifier]; ok && old.UpdatedAt > c.UpdatedAt {
		return
	}
	byID[c.Identifier] = c
	next := map[scope]*scopeIndex{}
	if cur := s.index.Load(); cur != nil {
		for k, v := range *cur {
			next[k] = v
		}
	}
	if si := buildIndex(byID); si != nil {
		next[sc] = si
	} else {
		delete(next, sc)
	}
	s.index.Store(&next)
}

// buildIndex returns the lookup structure of a scope's live overrides, or
// nil if none is live.
func buildIndex(byID map[string]Change) *scopeIndex {
	si := &scopeIndex{exact: map[string]*Override{}}
	for id, c := range byID {
		if c.Deleted {
			continue
		}
		o := c.Override
		if isPattern(id) {
			si.patterns = append(si.patterns, &o)
		} else {
			si.exact[id] = &o
		}
	}
	if len(si.exact) == 0 && len(si.patterns) == 0 {
		return nil
	}
	slices.SortFunc(si.patterns, func(a, b *Override) int { return compareSpecificity(a.Identifier, b.Identifier) })
	return si
}

// newID returns a new override id: "ovr_" and 96 random bits.
func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return "ovr_" + hex.EncodeToString(b[:])
}

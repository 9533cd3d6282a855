package overrides

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/puzpuzpuz/xsync/v4"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/overrides/memstore"
	"github.com/unkeyed/ratelimit/services/overrides/store"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Defaults and tuning of a [Registry].
const (
	// DefaultPollInterval is how often [Registry.Run] reads the store's
	// changes: a change made on one process reaches every other within
	// about this long. Two statements a poll (the database's clock, then
	// the changes since the last poll).
	DefaultPollInterval = 2 * time.Second
	// DefaultMaxPerWorkspace is how many live overrides one workspace may
	// hold. Every process of every region keeps every override in memory
	// (some 300 bytes each) and loads them all when it starts, so one
	// tenant's overrides are every process's cost.
	DefaultMaxPerWorkspace = 100_000
	// TombstoneRetention is how long the store keeps the row of a deleted
	// override before the worker's cleanup purges it. A process that has
	// not polled for half of it reads every override again instead of the
	// changes, which could no longer show it the purged deletions.
	TombstoneRetention = 24 * time.Hour
	// MaxListLimit is the largest page [Registry.List] returns.
	MaxListLimit = 100
	// DefaultListLimit is the page size when none is asked for.
	DefaultListLimit = 10

	// pollLookback widens every poll back in time: a change's revision is
	// the database's clock when its statement began, and it becomes
	// visible when it commits. A second covers a statement's commit with a
	// wide margin; a change read twice is applied once.
	pollLookback = time.Second
	// reconcileEvery and reconcileLookback: every reconcileEvery by the
	// store's clock, a poll reads the changes since reconcileLookback before
	// the previous poll instead, for a change whose commit waited longer
	// than pollLookback behind a lock (a backup's FLUSH TABLES WITH READ
	// LOCK, DDL, a stalled fsync): such a change reaches every process
	// within reconcileEvery and a poll interval of its commit, if its commit
	// came within reconcileLookback less that of its statement's start
	// (about four and a half minutes); later than that, at the full reload
	// after half of TombstoneRetention.
	reconcileEvery    = 30 * time.Second
	reconcileLookback = 5 * time.Minute
	// tombstoneMemory is how long memory keeps a deletion it applied, so
	// that a poll that read the override before it was deleted cannot
	// bring it back: far longer than any poll takes.
	tombstoneMemory = 10 * time.Minute
	// loadPageSize is how many overrides one statement of the start-up
	// load reads: 1,000,000 overrides are 100 statements, and a SIGTERM
	// waits for one at most.
	loadPageSize = 10_000
	// storeTimeout bounds every statement of a poll or a load but the
	// first, which reads the store's clock within clockTimeout: a process
	// starting while the database does not answer serves without
	// overrides after that long, and the poll loads them later.
	storeTimeout = 10 * time.Second
	clockTimeout = 2 * time.Second
)

// Registry holds every override in memory for [Registry.Lookup] and writes
// through to its store. Its methods are safe for concurrent use.
type Registry struct {
	store store.Overrides // the fleet's (MySQL), or this process's memory
	// pollStore is what the load and the polls read: store, or the same
	// table through connections no caller's request can take.
	pollStore store.Overrides
	clock     ratelimit.Clock
	logger    *slog.Logger
	poll      time.Duration
	maxPer    int64
	maxPat    int
	metrics   *metrics
	idx       *index

	// mu serializes loads and polls, and guards what follows.
	mu sync.Mutex
	// polled is the store's revision clock when the latest successful load
	// or poll began; 0 before the first load.
	polled int64
	// gen numbers the full loads, for dropUnseen.
	gen uint32
	// reconciled is the store's revision clock when the latest poll that
	// read reconcileLookback back began.
	reconciled int64

	// setting holds a mutex per workspace, held by Set from the check of
	// the caps to the change in memory, so that concurrent Sets of one
	// process cannot together pass a cap. It holds one per workspace that
	// ever set an override: workspaces are the operator's (tokens), not a
	// caller's to mint.
	setting *xsync.Map[string, *sync.Mutex]
}

// Option configures a [Registry].
type Option func(*Registry)

// WithStore keeps overrides in st, shared by the fleet, instead of this
// process's memory (a [memstore.Store]).
func WithStore(st store.Overrides) Option { return func(s *Registry) { s.store = st } }

// WithPollStore has the load and the polls read st instead of the store of
// [WithStore]: the same table through a pool of its own, so that callers'
// changes and reads, however slow, never hold the polls back.
func WithPollStore(st store.Overrides) Option { return func(s *Registry) { s.pollStore = st } }

// WithClock sets the clock of the in-memory store that keeps overrides
// without [WithStore]. A store given stamps changes by its own clock.
func WithClock(clock ratelimit.Clock) Option { return func(s *Registry) { s.clock = clock } }

// WithLogger sets the logger of the load and poll loop.
func WithLogger(logger *slog.Logger) Option { return func(s *Registry) { s.logger = logger } }

// WithPollInterval sets how often [Registry.Run] polls the store.
func WithPollInterval(d time.Duration) Option {
	return func(s *Registry) {
		if d > 0 {
			s.poll = d
		}
	}
}

// WithMaxPerWorkspace sets how many live overrides one workspace may hold
// ([DefaultMaxPerWorkspace] if n is not positive). The count is this
// process's copy: processes that create overrides at the same moment may
// together pass it by a few.
func WithMaxPerWorkspace(n int64) Option {
	return func(s *Registry) {
		if n > 0 {
			s.maxPer = n
		}
	}
}

// WithMaxPatternsPerNamespace sets how many live patterns one namespace
// may hold ([DefaultMaxPatternsPerNamespace] if n is not positive). Every
// decision of the namespace may try those that share its identifier's
// literal prefix or suffix.
func WithMaxPatternsPerNamespace(n int) Option {
	return func(s *Registry) {
		if n > 0 {
			s.maxPat = n
		}
	}
}

// WithRegisterer registers the registry's metrics with reg. Without it they
// are kept in a private registry.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(s *Registry) { s.metrics.reg = reg }
}

// New returns a registry. It starts nothing and reads nothing: call
// [Registry.Load] before taking traffic and [Registry.Run] to follow changes.
// It returns an error only if its metrics cannot be registered.
func New(opts ...Option) (*Registry, error) {
	s := &Registry{
		clock:   ratelimit.SystemClock{},
		logger:  slog.New(slog.DiscardHandler),
		poll:    DefaultPollInterval,
		maxPer:  DefaultMaxPerWorkspace,
		maxPat:  DefaultMaxPatternsPerNamespace,
		metrics: &metrics{},
		idx:     newIndex(),
		setting: xsync.NewMap[string, *sync.Mutex](),
	}
	for _, opt := range opts {
		opt(s)
	}
	if s.store == nil {
		s.store = memstore.New(memstore.WithClock(s.clock))
	}
	if s.pollStore == nil {
		s.pollStore = s.store
	}
	if err := s.metrics.register(s.idx); err != nil {
		return nil, fmt.Errorf("register override metrics: %w", err)
	}
	return s, nil
}

// Lookup returns the override that applies to identifier in a workspace's
// namespace: its exact override, else the most specific matching pattern.
// It reads memory only.
func (s *Registry) Lookup(workspace, namespace, identifier string) (Override, bool) {
	return s.idx.lookup(workspace, namespace, identifier)
}

// Switch returns the namespace switch of a workspace's namespace (the
// shadow override of identifier [NamespaceSwitch]), if one is set: every
// request of the namespace is then decided as a shadow call, whatever
// other override matches it. It reads memory only.
func (s *Registry) Switch(workspace, namespace string) (Override, bool) {
	return s.idx.namespaceSwitch(workspace, namespace)
}

// Set creates or replaces the override of o's identifier (or pattern). It
// returns a [*invalid.Error] for an override that breaks a
// rule, a [*CapacityError] for a new one in a workspace at its cap, and a
// [*PatternCapacityError] for a new pattern in a namespace at its cap. The
// override applies on this process at once, and on the others within their
// poll interval. The caps hold for the Sets of one process however many run
// at once; processes that set new overrides in one workspace at the same
// moment may together pass them by those in flight.
func (s *Registry) Set(ctx context.Context, o Override) (Override, error) {
	if err := validate(&o); err != nil {
		return Override{}, err
	}
	mu, _ := s.setting.LoadOrCompute(o.Workspace, func() (*sync.Mutex, bool) { return &sync.Mutex{}, false })
	mu.Lock()
	defer mu.Unlock()
	if e, ok := s.idx.get(o.Workspace, o.Namespace, o.Identifier); !ok || e.deleted {
		if s.idx.count(o.Workspace) >= s.maxPer {
			return Override{}, &CapacityError{Max: s.maxPer}
		}
		if isPattern(o.Identifier) {
			all, floating := s.idx.patternCounts(o.Workspace, o.Namespace)
			if all >= s.maxPat {
				return Override{}, &PatternCapacityError{Max: s.maxPat}
			}
			if compilePattern(&o).floating() && floating >= MaxFloatingPatterns {
				return Override{}, &PatternCapacityError{Max: MaxFloatingPatterns, Floating: true}
			}
		}
	}
	if o.ID == "" {
		o.ID = newID()
	}
	c, err := s.store.Set(ctx, o)
	if err != nil {
		return Override{}, fmt.Errorf("set override: %w", err)
	}
	s.applied(s.idx.apply(&c, 0, false))
	return c.Override, nil
}

// Get returns the override of an identifier (or pattern), or ErrNotFound.
func (s *Registry) Get(ctx context.Context, workspace, namespace, identifier string) (Override, error) {
	if err := validateKey(namespace, identifier); err != nil {
		return Override{}, err
	}
	return s.store.Get(ctx, workspace, namespace, identifier)
}

// List returns up to limit (1 to MaxListLimit; 0 means DefaultListLimit)
// overrides of a namespace whose identifier sorts after the given one, in
// identifier order, and whether more follow.
func (s *Registry) List(ctx context.Context, workspace, namespace, after string, limit int) ([]Override, bool, error) {
	if err := validateKey(namespace, "x"); err != nil {
		return nil, false, err
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, false, &invalid.Error{Field: "limit", Rule: fmt.Sprintf("must be between 1 and %d", MaxListLimit)}
	}
	out, err := s.store.List(ctx, workspace, namespace, after, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("list overrides: %w", err)
	}
	more := len(out) > limit
	return out[:min(len(out), limit)], more, nil
}

// Delete deletes the override of an identifier (or pattern), or returns
// ErrNotFound.
func (s *Registry) Delete(ctx context.Context, workspace, namespace, identifier string) error {
	if err := validateKey(namespace, identifier); err != nil {
		return err
	}
	c, err := s.store.Delete(ctx, workspace, namespace, identifier)
	if errors.Is(err, ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("delete override: %w", err)
	}
	s.applied(s.idx.apply(&c, 0, false))
	return nil
}

// applied counts a change that reached memory, or one it already held.
func (s *Registry) applied(ok bool) {
	if ok {
		s.metrics.applied.Inc()
	} else {
		s.metrics.stale.Inc()
	}
}

// newID returns a new override id: "ovr_" and 96 random bits.
func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return "ovr_" + hex.EncodeToString(b[:])
}

package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/puzpuzpuz/xsync/v4"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/singleflight"
)

// Service is a sliding-window rate limiter. Its methods are safe for
// concurrent use. Create it with [New]; run its background loops with
// [Service.Run].
type Service struct {
	region     string
	clock      Clock
	logger     *slog.Logger
	registerer prometheus.Registerer
	metrics    *metrics

	seed    maphash.Seed
	hashKey func(k windowKey, seed maphash.Seed) uint64 // tests force collisions
	// windows maps a key's hash to its window. A generic lock-free map keyed
	// by a fixed-size integer keeps lookups free of allocations; the rare key
	// whose hash is taken by another key lives in collided.
	windows  *xsync.Map[uint64, *window]
	collided collisions
	// perWorkspace counts each workspace's windows, to hold it to
	// maxPerWorkspace: one tenant sending endless distinct identifiers must
	// not take the memory every other tenant's decisions need.
	perWorkspace    *xsync.Map[string, *atomic.Int64]
	maxPerWorkspace int64

	janitorEvery time.Duration

	// The regional origin, when there is one.
	origin    Origin
	flight    singleflight.Group // one hydration per cold cell
	replays   queue[cellRef]
	refreshes queue[*window]

	// The global store, when there is one.
	global        GlobalStore
	globalBreaker *gobreaker.CircuitBreaker[any]
	globalEvery   globalIntervals
	// halfFloorOnly shares cells as before the presence floor and the
	// share-scaled flush step: from half the limit, a tenth of it at a
	// time. Only the accuracy report sets it, for its "before" rows.
	halfFloorOnly bool
	// grown holds the cells counted into at or above the utilization
	// floor (or shared by another region) since the last flush: what the
	// next prompt flush looks at, so its work follows the cells that
	// change rather than every window held.
	grown queue[cellRef]

	// running is set while Run runs.
	running atomic.Bool
}

// collisions holds the windows whose hash another key already owns in the
// main map. With 64-bit hashes this practically never holds anything; it
// exists so that correctness never rests on luck.
type collisions struct {
	mu sync.Mutex
	m  map[windowKey]*window
}

// New returns a limiter for the given region. It returns [ErrRegionRequired]
// if region is empty. New starts no goroutines.
func New(region string, opts ...Option) (*Service, error) {
	if region == "" {
		return nil, ErrRegionRequired
	}
	s := &Service{
		region:  region,
		clock:   systemClock{},
		logger:  slog.New(slog.DiscardHandler),
		seed:    maphash.MakeSeed(),
		hashKey: windowKey.hash,
		windows: xsync.NewMap[uint64, *window](),

		perWorkspace:    xsync.NewMap[string, *atomic.Int64](),
		maxPerWorkspace: DefaultMaxWindowsPerWorkspace,

		janitorEvery: janitorInterval,
		globalEvery: globalIntervals{
			flush:     DefaultGlobalFlushInterval,
			fullFlush: DefaultGlobalFullFlushInterval,
			sync:      DefaultGlobalSyncInterval,
		},
	}
	for _, opt := range opts {
		opt(s)
	}
	if s.registerer == nil {
		s.registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(s.registerer, func() float64 { return float64(s.ActiveWindows()) },
		func() float64 { return float64(s.replays.len() + s.refreshes.len()) })
	if err != nil {
		return nil, fmt.Errorf("register ratelimit metrics: %w", err)
	}
	s.metrics = m
	s.replays.limit = maxQueued
	s.refreshes.limit = maxQueued
	s.grown.limit = maxQueued
	s.globalEvery.fullFlush = max(s.globalEvery.fullFlush, s.globalEvery.flush)
	if s.global != nil {
		s.globalBreaker = s.newGlobalBreaker()
	}
	return s, nil
}

// Region returns the region this limiter counts for.
func (s *Service) Region() string { return s.region }

// ActiveWindows returns the number of sliding windows held in memory.
func (s *Service) ActiveWindows() int {
	s.collided.mu.Lock()
	n := len(s.collided.m)
	s.collided.mu.Unlock()
	return s.windows.Size() + n
}

// window returns the window of k for a request, creating it on first use.
// It returns a [*CapacityError] when creating it would take k's workspace
// past its cap.
func (s *Service) window(k *windowKey) (*window, error) {
	h := s.hashKey(*k, s.seed)
	if w, ok := s.windows.Load(h); ok && w.is(k) {
		return w, nil
	}
	w, created, err := s.loadOrCreate(k, h)
	if err != nil {
		s.metrics.windowsRejected.WithLabelValues("request").Inc()
		return nil, err
	}
	if created {
		s.metrics.windowsCreated.Inc()
	}
	return w, nil
}

// findWindow returns the window of k, or nil if the process holds none.
func (s *Service) findWindow(k *windowKey) *window {
	h := s.hashKey(*k, s.seed)
	if w, ok := s.windows.Load(h); ok {
		if w.is(k) {
			return w
		}
		s.collided.mu.Lock()
		defer s.collided.mu.Unlock()
		return s.collided.m[*k]
	}
	return nil
}

// forEachWindow calls f for every window held in memory.
func (s *Service) forEachWindow(f func(*window)) {
	s.windows.Range(func(_ uint64, w *window) bool {
		f(w)
		return true
	})
	s.collided.mu.Lock()
	collided := make([]*window, 0, len(s.collided.m))
	for _, w := range s.collided.m {
		collided = append(collided, w)
	}
	s.collided.mu.Unlock()
	for _, w := range collided {
		f(w)
	}
}

// loadOrCreate is the slow path of window: the key is new, or its hash is
// owned by another key. It reports whether it created the window, and
// creates none past the workspace's cap.
func (s *Service) loadOrCreate(k *windowKey, h uint64) (*window, bool, error) {
	var created *window
	full := false
	w, _ := s.windows.Compute(h, func(old *window, loaded bool) (*window, xsync.ComputeOp) {
		if loaded {
			return old, xsync.CancelOp
		}
		if !s.reserve(k.workspace) {
			full = true
			return nil, xsync.CancelOp
		}
		created = newWindow(k)
		return created, xsync.UpdateOp
	})
	if full {
		return nil, false, &CapacityError{Max: s.maxPerWorkspace}
	}
	if w.is(k) {
		return w, w == created, nil
	}
	s.collided.mu.Lock()
	defer s.collided.mu.Unlock()
	if w, ok := s.collided.m[*k]; ok {
		return w, false, nil
	}
	if !s.reserve(k.workspace) {
		return nil, false, &CapacityError{Max: s.maxPerWorkspace}
	}
	if s.collided.m == nil {
		s.collided.m = make(map[windowKey]*window)
	}
	w = newWindow(k)
	s.collided.m[*k] = w
	return w, true, nil
}

// reserve counts one more window for workspace and reports whether it fits
// under the cap; if not, nothing is counted.
func (s *Service) reserve(workspace string) bool {
	n, _ := s.perWorkspace.LoadOrCompute(workspace, func() (*atomic.Int64, bool) {
		return new(atomic.Int64), false
	})
	if n.Add(1) > s.maxPerWorkspace {
		n.Add(-1)
		return false
	}
	return true
}

// release counts one window of workspace fewer: the janitor removed it.
func (s *Service) release(workspace string) {
	if n, ok := s.perWorkspace.Load(workspace); ok {
		n.Add(-1)
	}
}

// Run runs the background loops until ctx is done: the janitor; with an
// origin, the replay and refresh loop; with a global store, the flush and
// sync loop. Once ctx is done, the first replays what is still unreplayed
// and the second flushes once more, each within its own timeout, and Run
// returns nil. Cancel ctx after the last request was decided, so that the
// final flush carries it. A Run while another runs returns [ErrRunning].
// Decisions work whether or not Run runs.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer s.running.Store(false)
	var wg sync.WaitGroup
	if s.origin != nil {
		wg.Go(func() { s.runOrigin(ctx) })
	}
	if s.global != nil {
		wg.Go(func() { s.runGlobal(ctx) })
	}
	s.runJanitor(ctx)
	wg.Wait()
	return nil
}

package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/global"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/model"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/regional"
)

// Service is the rate limiter: windows (sliding, fixed, calendar), token
// buckets and concurrency limits, decided from local memory and shared
// through the stores it is given. Its methods are safe for concurrent use. Create it with [New]; run its background loops with
// [Service.Run].
type Service struct {
	region  string
	clock   Clock
	metrics *metrics
	windows model.Table

	// The tiers that share counts, each nil when its store is not
	// configured: the processes of a region through the regional store,
	// the regions through the global store.
	regional *regional.Tier
	global   *global.Tier

	// refunds serializes the refunds of a key in this process (a stripe
	// of keys a lock), so that two cannot both give back what its cell
	// holds (see Refund).
	refunds [64]sync.Mutex

	janitorEvery time.Duration
	// running is set while Run runs.
	running atomic.Bool
}

// New returns a limiter for the given region. It returns [ErrRegionRequired]
// if region is empty. New starts no goroutines.
func New(region string, opts ...Option) (*Service, error) {
	if region == "" {
		return nil, ErrRegionRequired
	}
	cfg := settings{
		clock:           SystemClock{},
		logger:          slog.New(slog.DiscardHandler),
		maxPerWorkspace: DefaultMaxWindowsPerWorkspace,
		globalEvery: global.Intervals{
			Flush:        DefaultGlobalFlushInterval,
			FullFlush:    DefaultGlobalFullFlushInterval,
			Sync:         DefaultGlobalSyncInterval,
			FlushTimeout: DefaultGlobalFlushTimeout,
			SyncTimeout:  DefaultGlobalSyncTimeout,
		},
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.registerer == nil {
		cfg.registerer = prometheus.NewRegistry()
	}
	s := &Service{region: region, clock: cfg.clock, janitorEvery: janitorInterval}
	m, err := newMetrics(cfg.registerer, func() float64 { return float64(s.ActiveWindows()) },
		func() float64 { return float64(s.regional.Queued()) })
	if err != nil {
		return nil, fmt.Errorf("register ratelimit metrics: %w", err)
	}
	s.metrics = m
	s.windows.Init(cfg.maxPerWorkspace, &CapacityError{Max: cfg.maxPerWorkspace}, cells.Counters{
		Created:  m.windowsCreated,
		Evicted:  m.windowsEvicted,
		Rejected: m.windowsRejected.WithLabelValues("request"),
	})
	s.windows.Contention, s.windows.BeforeCAS = cells.NewContention(m.contended), cfg.beforeCAS
	if cfg.regional != nil {
		s.regional = regional.New(cfg.regional, cfg.clock, &m.regional, &s.windows.Table, s.windows.Pools(), &s.windows)
		s.windows.Regional = s.regional
	}
	if cfg.global != nil {
		gc := global.Config{Region: region, Store: cfg.global, Regional: cfg.regional,
			Clock: cfg.clock, Logger: cfg.logger, Metrics: &m.global,
			Table: &s.windows.Table, Pools: s.windows.Pools(), Models: &s.windows,
			Every: cfg.globalEvery, HalfFloorOnly: cfg.halfFloorOnly}
		if s.regional != nil {
			gc.ReadSlots = s.regional.ReadSlots
		}
		s.global = global.New(gc)
		s.windows.Global = s.global
		if s.regional != nil && s.global.Indexes() {
			// Only a store that indexes marks is asked to.
			s.regional.MarkWith(s.global.MarkFor)
		}
	}
	return s, nil
}

// LastGlobalSync returns when the latest read of the other regions' counts
// that succeeded began: the zero time before the first, and without a
// global store.
func (s *Service) LastGlobalSync() time.Time {
	if s.global == nil {
		return time.Time{}
	}
	return s.global.LastSync()
}

// Region returns the region this limiter counts for.
func (s *Service) Region() string { return s.region }

// ActiveWindows returns the number of sliding windows held in memory.
func (s *Service) ActiveWindows() int { return s.windows.Len() }

// Run runs the background loops until ctx is done: the janitor; with a regional
// store, the regional tier's replay and refresh loop; with a global store, the
// global tier's flush loop and sync loop. Once ctx is done, the regional tier
// replays what is still unreplayed and the global tier runs one more full
// flush, each within its own timeout, and Run returns nil. Cancel ctx after the
// last request was decided, so that the final flush carries it. A Run while
// another runs returns [ErrRunning]. Decisions work whether or not Run runs.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer s.running.Store(false)
	var wg sync.WaitGroup
	if s.regional != nil {
		wg.Go(func() { s.regional.Run(ctx) })
	}
	if s.global != nil {
		wg.Go(func() { s.global.Run(ctx) })
	}
	s.runJanitor(ctx)
	wg.Wait()
	return nil
}

// janitorInterval is how often idle windows are evicted. A window is idle
// once both its cells are older than the previous fixed window, so with the
// shortest window of 1 s an idle window lingers at most 2 s + 10 s (a
// calendar's once it holds no cell of the current period; a token bucket's
// not before it is full again, since no store holds its level). A walk
// reads each window once without locking the map as a whole: a request
// waits at most for the removal of one idle window in its bucket.
const janitorInterval = 10 * time.Second

// runJanitor evicts idle windows every interval until ctx is done.
func (s *Service) runJanitor(ctx context.Context) {
	t := time.NewTicker(s.janitorEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.windows.EvictIdle(s.clock.Now())
		}
	}
}

package keys

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// tableTimeout bounds one read of the table: a poll that takes longer is
// abandoned and tried again at the next interval.
const tableTimeout = 5 * time.Second

// Table keeps a Ring's keys in step with a Store: it reads the store's
// Summary every poll interval, and every key only when the summary
// changed. A poll that fails keeps the keys last read: a process that
// cannot reach MySQL goes on with the keys it knew.
type Table struct {
	store    Store
	ring     *Ring
	interval time.Duration
	logger   *slog.Logger

	mu   sync.Mutex // one poll at a time
	seen Summary
	read bool // seen holds a summary read

	failures prometheus.Counter
	keys     prometheus.Gauge
}

// TableOption configures a Table.
type TableOption func(*Table)

// WithPollInterval sets how often the store is polled (the override poll
// interval, so that a key changes as fast as an override does).
func WithPollInterval(d time.Duration) TableOption { return func(t *Table) { t.interval = d } }

// WithTableLogger sets the logger of failed polls.
func WithTableLogger(l *slog.Logger) TableOption { return func(t *Table) { t.logger = l } }

// NewTable returns the poller of store into ring, and makes ring wait for
// its first load (see Ring.Open). It reads nothing yet: Load and Run do.
// Call it before the ring is in use.
func NewTable(store Store, ring *Ring, reg prometheus.Registerer, opts ...TableOption) (*Table, error) {
	t := &Table{store: store, ring: ring, interval: 2 * time.Second, logger: slog.New(slog.DiscardHandler),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unkey_auth_keys_poll_failures_total",
			Help: "Polls of the keys table that failed; the keys last read stay in force.",
		}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "unkey_auth_keys",
			Help: "Live keys of the keys table in this process's memory.",
		})}
	for _, o := range opts {
		o(t)
	}
	for _, c := range []prometheus.Collector{t.failures, t.keys} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register keys metrics: %w", err)
		}
	}
	ring.hasTable = true
	return t, nil
}

// Load reads the keys if they changed since the last read (or were never
// read) and puts them in force.
func (t *Table) Load(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, tableTimeout)
	defer cancel()
	sum, err := t.store.Summary(ctx)
	if err != nil {
		return fmt.Errorf("poll keys: %w", err)
	}
	if t.read && sum == t.seen {
		return nil
	}
	all, err := t.store.All(ctx)
	if err != nil {
		return fmt.Errorf("poll keys: %w", err)
	}
	set, errs := NewSet(all)
	for _, err := range errs {
		t.logger.Error("keys table: a key is left out", "error", err)
	}
	t.ring.setTable(set)
	t.keys.Set(float64(set.Len()))
	// The summary read before the keys: a change in between is read
	// again by the next poll, never missed.
	t.seen, t.read = sum, true
	return nil
}

// Run polls every interval until ctx ends.
func (t *Table) Run(ctx context.Context) error {
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := t.Load(ctx); err != nil && ctx.Err() == nil {
				t.failures.Inc()
				t.logger.Warn("poll keys: the keys last read stay in force", "error", err)
			}
		}
	}
}

package keys

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/keys/store"
)

// tableTimeout bounds one read of the table: a poll that takes longer is
// abandoned and tried again at the next interval.
const tableTimeout = 5 * time.Second

// changesLookback is how far before the latest revision a process holds a
// poll reads changes from (revisions are unix µs): a change whose
// statement began up to this long before it committed is read without
// reading every key.
const changesLookback = 10 * time.Second

// Table keeps a Ring's keys in step with a store.Store: it reads the
// store's summary every poll interval; when it changed, the keys changed
// since the latest revision it holds (less changesLookback), and only when those do
// not account for the new summary (a change that committed behind a lock
// with an older revision) every key. A poll that fails keeps the keys last
// read: a process that cannot reach MySQL goes on with the keys it knew.
type Table struct {
	store    store.Store
	ring     *Ring
	interval time.Duration
	logger   *slog.Logger

	mu   sync.Mutex     // one poll (or Apply) at a time
	seen store.Summary  // the summary rows sum up to
	rows map[string]Key // every key read, revoked ones included, by id; nil before the first load
	set  *Set           // what rows hold, in force in the ring

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
func NewTable(st store.Store, ring *Ring, reg prometheus.Registerer, opts ...TableOption) (*Table, error) {
	t := &Table{store: st, ring: ring, interval: 2 * time.Second, logger: slog.New(slog.DiscardHandler),
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

// Load reads the keys that changed since the last read (every key, the
// first time) and puts them in force.
func (t *Table) Load(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, tableTimeout)
	defer cancel()
	sum, err := t.store.Summary(ctx)
	if err != nil {
		return fmt.Errorf("poll keys: %w", err)
	}
	if t.rows != nil && sum == t.seen {
		return nil
	}
	changed, ok := []Key(nil), false
	if t.rows != nil {
		changed, ok = t.applyChanges(ctx, sum)
	}
	if ok {
		t.put(changed)
	} else {
		all, err := t.store.All(ctx)
		if err != nil {
			return fmt.Errorf("poll keys: %w", err)
		}
		t.rows = make(map[string]Key, len(all))
		for _, k := range all {
			t.rows[k.ID] = k
		}
		set, errs := NewSet(all)
		t.use(set, errs)
	}
	// The summary read before the keys: a change in between is read
	// again by the next poll, never missed.
	t.seen = sum
	return nil
}

// applyChanges reads the keys changed since the latest revision held (less
// changesLookback), and returns those newer than the rows hold, and
// whether the rows with them sum up to sum, so that nothing else changed.
// On an error it reports false: the caller reads every key.
func (t *Table) applyChanges(ctx context.Context, sum store.Summary) ([]Key, bool) {
	var latest int64
	for _, k := range t.rows {
		latest = max(latest, k.Revision)
	}
	read, err := t.store.Changes(ctx, latest-changesLookback.Microseconds())
	if err != nil {
		return nil, false
	}
	var changed []Key
	local := store.Summary{Rows: int64(len(t.rows))}
	for _, k := range t.rows {
		local.Revisions ^= k.Revision
	}
	for _, k := range read {
		old, held := t.rows[k.ID]
		if held && k.Revision <= old.Revision {
			continue
		}
		changed = append(changed, k)
		if held {
			local.Revisions ^= old.Revision
		} else {
			local.Rows++
		}
		local.Revisions ^= k.Revision
	}
	return changed, local == sum
}

// put puts changed keys in t.rows and in force, parsing only them.
func (t *Table) put(changed []Key) {
	if len(changed) == 0 {
		return
	}
	added := 0
	for _, k := range changed {
		if _, held := t.rows[k.ID]; !held {
			added++
		}
		t.rows[k.ID] = k
	}
	set, errs := t.set.with(changed, added)
	t.use(set, errs)
}

// use puts set in force.
func (t *Table) use(set *Set, errs []error) {
	for _, err := range errs {
		t.logger.Error("keys table: a key is left out", "error", err)
	}
	t.set = set
	t.ring.setTable(set)
	t.keys.Set(float64(set.Len()))
}

// Apply puts k, a key this process just created, changed or revoked in
// the store, in force at once, rather than at the next poll: the caller
// that revoked a key expects it refused by the process that answered. A
// k older than the one held changes nothing; before the first load,
// nothing either (the load reads it).
func (t *Table) Apply(k Key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rows == nil {
		return
	}
	if old, held := t.rows[k.ID]; held && k.Revision <= old.Revision {
		return
	}
	t.put([]Key{k})
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

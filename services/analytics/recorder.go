package analytics

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/internal/topk"
	"github.com/unkeyed/ratelimit/services/analytics/store"
)

// Tuning of a Recorder.
const (
	// DefaultFlushInterval is how often a process adds what it counted to
	// the store: the most a query lags the decisions by, plus a flush.
	DefaultFlushInterval = store.DefaultReportInterval
	// SketchSize is K of each heavy-hitter sketch, one for denials and one
	// for traffic per namespace and flush: an identifier with more than
	// 1/SketchSize of a namespace's denials (or decisions) in a process's
	// flush interval is named, its count overstated by at most that.
	SketchSize = 64
	// TopPerFlush is how many identifiers of each sketch a flush writes.
	TopPerFlush = 20
	// queueSize bounds the decisions waiting to be counted; more are
	// dropped and counted in unkey_analytics_dropped_total.
	queueSize = 1 << 16
	// minFlushTimeout is the least time a flush gets, however short the
	// interval: with the interval alone, a 200 ms interval on a loaded
	// machine timed flushes out one after another, and what they held
	// reached the store late, or (before Add was one transaction) twice.
	minFlushTimeout = 2 * time.Second
	// maxScopes bounds the namespaces (of all workspaces) a process counts
	// in one flush interval; maxScopesPerWorkspace one workspace's share,
	// so that one tenant's endless namespaces cannot crowd out the
	// others'. Decisions of a namespace past either are dropped and
	// counted.
	maxScopes             = 10_000
	maxScopesPerWorkspace = 1_000
	// maxPending bounds the rows kept for the next flush when the store
	// failed.
	maxPending = 200_000
	// maxBatchRows bounds the rows of one Add (buckets and named
	// identifiers together): a flush is sent as batches of at most this
	// many, each its own transaction under its own id, so that one
	// tenant's many namespaces make more batches, not one that times out
	// and is sent again whole with everyone's rows.
	maxBatchRows = 5_000
)

// batch is one Add of a flush, kept with its id until the store took it.
type batch struct {
	id      string
	made    time.Time
	buckets []Bucket
	top     []Entry
}

// maxPendingAge bounds how long a failed batch is sent again: a store
// remembers batch ids for an hour, and one whose answer was lost must not
// be added again once its id is forgotten.
const maxPendingAge = 50 * time.Minute

func (b batch) rows() int { return len(b.buckets) + len(b.top) }

// decision is one decision waiting to be counted.
type decision struct {
	workspace, namespace, identifier string
	passed                           bool
	shadow                           bool   // passed, where a shadow limit would have refused
	n                                uint64 // decisions, 1 but for RecordN
	minute                           int64  // unix ms
}

// scopeMinute names a namespace's minute.
type scopeMinute struct {
	workspace, namespace string
	minute               int64
}

// tally is what a flush interval counted of one namespace's minute.
type tally struct {
	passed, denied, shadowDenied int64
	// traffic counts every decision by identifier, denials the denied,
	// shadows the shadow-denied (created at the first).
	traffic, denials, shadows *topk.Sketch
}

// Recorder counts a process's decisions and adds them to a Store every
// flush interval. Record is safe for concurrent use and never blocks;
// counting happens in Run's goroutine, off the request path.
type Recorder struct {
	store    Store
	fleet    Fleet // nil: no roll call
	self     func() Process
	now      func() time.Time
	logger   *slog.Logger
	every    time.Duration
	queue    chan decision
	failures prometheus.Counter
	// The series of unkey_analytics_dropped_total by reason, resolved
	// once: a full queue drops on the request path, where a label lookup
	// would take the vector's lock per decision.
	droppedQueue, droppedScopes, droppedStore prometheus.Counter

	// Owned by Run.
	tallies map[scopeMinute]*tally
	perWS   map[string]int
	pending []batch // sent and failed, oldest first: sent again first
	// prefix and seq name the batches: random to the process, then
	// counting.
	prefix string
	seq    int64
}

// RecorderOption configures a Recorder.
type RecorderOption func(*Recorder)

// WithFlushInterval sets how often the recorder adds to the store
// (DefaultFlushInterval if zero or less).
func WithFlushInterval(d time.Duration) RecorderOption {
	return func(r *Recorder) {
		if d > 0 {
			r.every = d
		}
	}
}

// WithRollCall records the process self describes in fleet at every flush,
// with the recorder's flush interval.
func WithRollCall(fleet Fleet, self func() Process) RecorderOption {
	return func(r *Recorder) { r.fleet, r.self = fleet, self }
}

// WithClock sets the clock (time.Now by default).
func WithClock(now func() time.Time) RecorderOption { return func(r *Recorder) { r.now = now } }

// NewRecorder returns a recorder adding to store, registering its metrics
// with reg. It starts nothing: Run counts and flushes.
func NewRecorder(store Store, logger *slog.Logger, reg prometheus.Registerer, opts ...RecorderOption) (*Recorder, error) {
	r := &Recorder{store: store, now: time.Now, logger: logger, every: DefaultFlushInterval,
		queue: make(chan decision, queueSize), prefix: rand.Text()[:16]}
	for _, o := range opts {
		o(r)
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "unkey_analytics_dropped_total",
		Help: "Decisions not counted in the analytics, by reason: queue (the recorder fell behind), scopes (too many namespaces in one flush interval), store (a flush's rows dropped after the store failed for long).",
	}, []string{"reason"})
	r.droppedQueue, r.droppedScopes, r.droppedStore = dropped.WithLabelValues("queue"), dropped.WithLabelValues("scopes"),
		dropped.WithLabelValues("store")
	r.failures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "unkey_analytics_flush_failures_total",
		Help: "Analytics flushes the store failed (their rows are sent again with the next).",
	})
	for _, c := range []prometheus.Collector{dropped, r.failures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	r.reset()
	return r, nil
}

func (r *Recorder) reset() {
	r.tallies = map[scopeMinute]*tally{}
	r.perWS = map[string]int{}
}

// Record counts one decision of identifier in a workspace's namespace. It
// never blocks: a decision that finds the queue full is dropped and
// counted.
func (r *Recorder) Record(workspace, namespace, identifier string, passed bool) {
	r.RecordN(workspace, namespace, identifier, passed, 1)
}

// RecordShadowDenied counts one decision of identifier that admitted where
// its shadow limit would have refused: apart from the denials, so that a
// shadow limit's rollout shows whom it would refuse. It never blocks, as
// Record.
func (r *Recorder) RecordShadowDenied(workspace, namespace, identifier string) {
	r.enqueue(decision{workspace: workspace, namespace: namespace, identifier: identifier, passed: true, shadow: true, n: 1})
}

// RecordN counts n decisions of identifier alike, as Record does: those a
// proxy made itself and reported (Envoy's quota filter reports how many
// requests it denied).
func (r *Recorder) RecordN(workspace, namespace, identifier string, passed bool, n uint64) {
	if n > 0 {
		r.enqueue(decision{workspace: workspace, namespace: namespace, identifier: identifier, passed: passed, n: n})
	}
}

// enqueue hands d, stamped with its minute, to Run, or drops and counts it
// when the queue is full.
func (r *Recorder) enqueue(d decision) {
	d.minute = r.now().UnixMilli() / 60_000 * 60_000
	select {
	case r.queue <- d:
	default:
		r.droppedQueue.Inc()
	}
}

// Run counts recorded decisions and flushes them every interval until ctx
// is done, then flushes once more.
func (r *Recorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case d := <-r.queue:
			r.count(d)
		case <-t.C:
			// A flush gets an interval, and at least minFlushTimeout: a
			// store that hangs holds back the counting (the queue drops
			// and counts meanwhile), never the next flushes for long; a
			// store that is merely slow (a loaded machine, a short
			// interval) still gets its flush through.
			fctx, cancel := context.WithTimeout(ctx, max(r.every, minFlushTimeout))
			r.flush(fctx)
			cancel()
		case <-ctx.Done():
			for {
				select {
				case d := <-r.queue:
					r.count(d)
					continue
				default:
				}
				break
			}
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			r.flush(final)
			cancel()
			return nil
		}
	}
}

// count adds d to its namespace's tally.
func (r *Recorder) count(d decision) {
	k := scopeMinute{d.workspace, d.namespace, d.minute}
	t, ok := r.tallies[k]
	if !ok {
		if len(r.tallies) >= maxScopes || r.perWS[d.workspace] >= maxScopesPerWorkspace {
			r.droppedScopes.Inc()
			return
		}
		k.workspace, k.namespace = strings.Clone(d.workspace), strings.Clone(d.namespace)
		t = &tally{traffic: topk.New(SketchSize), denials: topk.New(SketchSize)}
		r.tallies[k] = t
		r.perWS[k.workspace]++
	}
	t.traffic.Add(d.identifier, d.n)
	switch {
	case d.shadow:
		t.shadowDenied += int64(d.n)
		if t.shadows == nil {
			t.shadows = topk.New(SketchSize)
		}
		t.shadows.Add(d.identifier, d.n)
	case d.passed:
		t.passed += int64(d.n)
	default:
		t.denied += int64(d.n)
		t.denials.Add(d.identifier, d.n)
	}
}

// flush adds what was counted since the last flush to the store, after
// the batches a failed flush left (under their ids, so that one whose
// answer was lost is not added twice), and records the roll call.
func (r *Recorder) flush(ctx context.Context) {
	batches := r.pending
	var cur batch
	emit := func() {
		if cur.rows() > 0 {
			r.seq++
			cur.id, cur.made = fmt.Sprintf("%s-%d", r.prefix, r.seq), r.now()
			batches = append(batches, cur)
			cur = batch{}
		}
	}
	for k, t := range r.tallies {
		start := time.UnixMilli(k.minute)
		top := named(t)
		if cur.rows()+1+len(top) > maxBatchRows {
			emit()
		}
		cur.buckets = append(cur.buckets, Bucket{Workspace: k.workspace, Namespace: k.namespace, Start: start,
			Passed: t.passed, Denied: t.denied, ShadowDenied: t.shadowDenied})
		for _, it := range top {
			cur.top = append(cur.top, Entry{Bucket: Bucket{Workspace: k.workspace, Namespace: k.namespace, Start: start,
				Passed: it.Passed, Denied: it.Denied, ShadowDenied: it.ShadowDenied}, Identifier: it.Identifier})
		}
	}
	emit()
	r.reset()
	r.pending = nil
	for i, b := range batches {
		if err := r.store.Add(ctx, b.id, b.buckets, b.top); err != nil {
			r.failures.Inc()
			r.logger.WarnContext(ctx, "add analytics: sent again with the next flush", "error", err, "batches", len(batches)-i)
			r.keep(batches[i:])
			break
		}
	}
	if r.fleet != nil {
		p := r.self()
		p.FlushInterval = r.every
		if err := r.fleet.Seen(ctx, p); err != nil {
			r.logger.WarnContext(ctx, "record the roll call", "error", err)
		}
	}
}

// keep holds batches for the next flush, the newest maxPending rows of
// them made within maxPendingAge; older ones are dropped and counted.
func (r *Recorder) keep(batches []batch) {
	for len(batches) > 0 && r.now().Sub(batches[0].made) > maxPendingAge {
		r.droppedStore.Add(float64(sumDecisions(batches[0].buckets)))
		batches = batches[1:]
	}
	rows := 0
	for i := len(batches) - 1; i >= 0; i-- {
		if rows += batches[i].rows(); rows > maxPending {
			for _, b := range batches[:i+1] {
				r.droppedStore.Add(float64(sumDecisions(b.buckets)))
			}
			batches = batches[i+1:]
			break
		}
	}
	r.pending = batches
}

func sumDecisions(bs []Bucket) int64 {
	var n int64
	for _, b := range bs {
		n += b.Passed + b.Denied + b.ShadowDenied
	}
	return n
}

// named returns the identifiers a tally's sketches name: the TopPerFlush
// most denied, the TopPerFlush most shadow-denied and the TopPerFlush
// busiest, with their denials and shadow denials (from their sketches, 0
// where one does not keep them) and passed decisions (the traffic sketch's
// count less those).
func named(t *tally) []Identifier {
	var out []Identifier
	seen := map[string]bool{}
	add := func(key string) {
		if seen[key] {
			return
		}
		seen[key] = true
		var denied, shadow, total int64
		if it, ok := t.denials.Get(key); ok {
			denied = int64(it.Count)
		}
		if t.shadows != nil {
			if it, ok := t.shadows.Get(key); ok {
				shadow = int64(it.Count)
			}
		}
		total = denied + shadow
		if it, ok := t.traffic.Get(key); ok {
			total = max(total, int64(it.Count))
		}
		out = append(out, Identifier{Identifier: key, Passed: total - denied - shadow, Denied: denied, ShadowDenied: shadow})
	}
	for _, it := range t.denials.Top(TopPerFlush) {
		add(it.Key)
	}
	if t.shadows != nil {
		for _, it := range t.shadows.Top(TopPerFlush) {
			add(it.Key)
		}
	}
	for _, it := range t.traffic.Top(TopPerFlush) {
		add(it.Key)
	}
	return out
}

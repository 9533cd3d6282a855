package ratelimit

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/global"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/regional"
)

// metrics are the limiter's own Prometheus metrics. None has a label with
// unbounded values: workspaces, namespaces and identifiers never become
// labels. Decisions are counted by the caller (the API), which keeps the
// request path free of shared counters.
type metrics struct {
	windowsCreated  prometheus.Counter
	windowsEvicted  prometheus.Counter
	windowsRejected *prometheus.CounterVec
	contended       prometheus.Counter

	queueOverflow *prometheus.CounterVec
	regional      regional.Metrics

	global global.Metrics

	refunded prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, activeWindows, queueDepth func() float64) (*metrics, error) {
	m := &metrics{
		windowsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unkey_ratelimit_windows_created_total",
			Help: "Sliding windows created by traffic.",
		}),
		windowsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unkey_ratelimit_windows_evicted_total",
			Help: "Sliding windows removed by the janitor because no cell of theirs could affect a decision any more.",
		}),
		windowsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unkey_ratelimit_windows_rejected_total",
			Help: "Windows not created because their workspace held the most windows allowed, by what asked for them (request: answered resource_exhausted; sync: an imported row skipped).",
		}, []string{"source"}),
		contended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unkey_ratelimit_contended_decisions_total",
			Help: "Decisions that lost several races in a row to count on their key (or found another such decision on it) and took the key's lock: a hot key on many cores. None is refused for it.",
		}),
		queueOverflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unkey_ratelimit_origin_queue_overflow_total",
			Help: "Cells or windows that did not fit in the replay, refresh or prompt global flush queue (queue=replay|refresh|flush); a cell that did not fit is queued by its next accepted request, and the full global flush publishes it meanwhile.",
		}, []string{"queue"}),
		regional: regional.Metrics{
			Ops: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "unkey_ratelimit_origin_operations_total",
				Help: "Calls to the regional store (Redis) by operation (cold, aged, stale, strict, replay) and result (ok; partial: some cells failed, as when one node of a cluster is down; error; rejected: the store's breaker was open and nothing was sent).",
			}, []string{"op", "result"}),
			Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name:    "unkey_ratelimit_origin_duration_seconds",
				Help:    "Latency of calls to the regional store by operation.",
				Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .3, 1},
			}, []string{"op"}),
			ReplayExpired: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "unkey_ratelimit_origin_replay_expired_total",
				Help: "Accepted units never replayed because the regional store stayed unavailable until their window could no longer affect any decision.",
			}),
			StrictActivations: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "unkey_ratelimit_strict_mode_activations_total",
				Help: "Keys put in strict mode by a denial or by an admission that left at most a fifth of the limit (not counting those that extend it).",
			}),
		},
		global: global.Metrics{
			Writes: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "unkey_ratelimit_global_writes_total",
				Help: "Window count rows this process published to the global store.",
			}),
			WriteErrors: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "unkey_ratelimit_global_write_errors_total",
				Help: "Global flushes that failed (their rows are published on a later flush).",
			}),
			RowsApplied: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "unkey_ratelimit_global_sync_rows_applied_total",
				Help: "Rows of the global store imported into cells.",
			}),
			SyncErrors: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "unkey_ratelimit_global_sync_errors_total",
				Help: "Global syncs that failed.",
			}),
			LastSync: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "unkey_ratelimit_global_last_sync_timestamp_seconds",
				Help: "When the latest global sync that succeeded began, in unix seconds (0 before the first, and without a global store): how old this process's view of the other regions is.",
			}),
			EntriesCreated: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "unkey_ratelimit_global_entries_created_total",
				Help: "Windows created by the global sync for keys this process had no traffic for (not counted in windows_created_total).",
			}),
			RowsLastPoll: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "unkey_ratelimit_global_rows_last_poll",
				Help: "Rows the latest global sync returned.",
			}),
			RowsFuture: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "unkey_ratelimit_global_sync_rows_future_total",
				Help: "Rows of the global store ignored because their window lies more than one window ahead of this process's clock.",
			}),
			IdlePublished: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "unkey_ratelimit_global_idle_cells_published_total",
				Help: "Cells of the region published to the global store from the regional store's index because no process marked them for two full flush intervals: what a process that died, or stopped with the global store down, counted and had not published (and some quiet cells again).",
			}),
		},
		refunded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unkey_ratelimit_refunded_units_total",
			Help: "Units given back to window cells by settled reservations (what callers reserved and did not spend).",
		}),
	}
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "unkey_ratelimit_windows_active",
		Help: "Sliding windows held in memory.",
	}, activeWindows)
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "unkey_ratelimit_origin_queue_depth",
		Help: "Cells waiting for replay plus windows waiting for a background refresh.",
	}, queueDepth)
	// Every known label value from the start, so that a rule's rate() and
	// increase() see the series at 0 before the first event.
	for _, source := range []string{"request", "sync"} {
		m.windowsRejected.WithLabelValues(source)
	}
	for _, queue := range []string{"replay", "refresh", "flush"} {
		m.queueOverflow.WithLabelValues(queue)
	}
	m.regional.ReplayOverflow = m.queueOverflow.WithLabelValues("replay")
	m.regional.RefreshOverflow = m.queueOverflow.WithLabelValues("refresh")
	m.global.Rejected = m.windowsRejected.WithLabelValues("sync")
	m.global.Overflow = m.queueOverflow.WithLabelValues("flush")
	for _, c := range []prometheus.Collector{m.windowsCreated, m.windowsEvicted, m.windowsRejected, m.contended, active,
		m.regional.Ops, m.regional.Latency, m.queueOverflow, m.regional.ReplayExpired, m.regional.StrictActivations, depth,
		m.global.Writes, m.global.WriteErrors, m.global.RowsApplied, m.global.SyncErrors, m.global.LastSync, m.global.EntriesCreated, m.global.RowsLastPoll, m.global.RowsFuture, m.global.IdlePublished, m.refunded} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

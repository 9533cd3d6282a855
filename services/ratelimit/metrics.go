package ratelimit

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the limiter's own Prometheus metrics. None has a label with
// unbounded values: workspaces, namespaces and identifiers never become
// labels. Decisions are counted by the caller (the API), which keeps the
// request path free of shared counters.
type metrics struct {
	windowsCreated prometheus.Counter
	windowsEvicted prometheus.Counter
	casExhausted   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, activeWindows func() float64) (*metrics, error) {
	m := &metrics{
		windowsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unkey_ratelimit_windows_created_total",
			Help: "Sliding windows created by traffic.",
		}),
		windowsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unkey_ratelimit_windows_evicted_total",
			Help: "Sliding windows removed by the janitor because no cell of theirs could affect a decision any more.",
		}),
		casExhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unkey_ratelimit_cas_exhausted_total",
			Help: "Decisions denied because the compare-and-swap loop ran out of attempts under contention.",
		}),
	}
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "unkey_ratelimit_windows_active",
		Help: "Sliding windows held in memory.",
	}, activeWindows)
	for _, c := range []prometheus.Collector{m.windowsCreated, m.windowsEvicted, m.casExhausted, active} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

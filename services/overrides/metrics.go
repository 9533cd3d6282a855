package overrides

import "github.com/prometheus/client_golang/prometheus"

// metrics are a registry's Prometheus metrics.
type metrics struct {
	reg         prometheus.Registerer
	applied     prometheus.Counter
	stale       prometheus.Counter
	loadSeconds prometheus.Gauge
}

// register creates the metrics and registers them with m.reg (a private
// registry if nil). The live count is read from idx when scraped.
func (m *metrics) register(idx *index) error {
	if m.reg == nil {
		m.reg = prometheus.NewRegistry()
	}
	m.applied = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "unkey_ratelimit_overrides_applied_total",
		Help: "Override changes applied to this process's copy: each change once, whether this process made it or a poll or load read it.",
	})
	m.stale = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "unkey_ratelimit_overrides_stale_total",
		Help: "Override states read that this process's copy already held, or held a later state of: a poll's look-back reads a change again, and applies it once.",
	})
	m.loadSeconds = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "unkey_ratelimit_overrides_load_seconds",
		Help: "How long the latest full load of every override took.",
	})
	live := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "unkey_ratelimit_overrides_live",
		Help: "Live overrides this process holds, exact identifiers and patterns.",
	}, func() float64 { return float64(idx.live.Load()) })
	for _, c := range []prometheus.Collector{m.applied, m.stale, m.loadSeconds, live} {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

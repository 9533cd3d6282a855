package rlsconfig

import "github.com/prometheus/client_golang/prometheus"

// loadCounters count the configurations a source compiled, by result,
// under this service's name and envoyproxy/ratelimit's
// (ratelimit_service_config_load_success and _error, which Envoy
// Gateway's dashboards query).
type loadCounters struct {
	ours                       *prometheus.CounterVec
	upstreamOK, upstreamFailed prometheus.Counter
}

// registerLoads registers with reg the metrics every source has: its loads
// (help says what one is) and the rules of the configuration config
// returns, the one in force.
func registerLoads(reg prometheus.Registerer, help string, config func() *Config) (*loadCounters, error) {
	l := &loadCounters{
		ours: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "unkey_rls_config_loads_total", Help: help}, []string{"result"}),
		upstreamOK: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success",
			Help: "envoyproxy/ratelimit's name for unkey_rls_config_loads_total{result=\"ok\"}."}),
		upstreamFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error",
			Help: "envoyproxy/ratelimit's name for unkey_rls_config_loads_total{result=\"error\"}."}),
	}
	rules := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "unkey_rls_config_rules", Help: "Rules of the rate limit configuration in force."},
		func() float64 {
			_, n := config().Domains()
			return float64(n)
		})
	for _, c := range []prometheus.Collector{l.ours, l.upstreamOK, l.upstreamFailed, rules} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func (l *loadCounters) ok() {
	l.ours.WithLabelValues("ok").Inc()
	l.upstreamOK.Inc()
}

func (l *loadCounters) failed() {
	l.ours.WithLabelValues("error").Inc()
	l.upstreamFailed.Inc()
}

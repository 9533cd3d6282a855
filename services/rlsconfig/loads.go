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

func newLoadCounters(help string) *loadCounters {
	return &loadCounters{
		ours: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "unkey_rls_config_loads_total", Help: help}, []string{"result"}),
		upstreamOK: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success",
			Help: "envoyproxy/ratelimit's name for unkey_rls_config_loads_total{result=\"ok\"}."}),
		upstreamFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error",
			Help: "envoyproxy/ratelimit's name for unkey_rls_config_loads_total{result=\"error\"}."}),
	}
}

func (l *loadCounters) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.ours, l.upstreamOK, l.upstreamFailed}
}

func (l *loadCounters) ok() {
	l.ours.WithLabelValues("ok").Inc()
	l.upstreamOK.Inc()
}

func (l *loadCounters) failed() {
	l.ours.WithLabelValues("error").Inc()
	l.upstreamFailed.Inc()
}

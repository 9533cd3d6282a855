package penalties

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Kinds of unkey_ratelimit_penalties_total.
const (
	kindFirst   = "first"   // a block after no recent one
	kindRepeat  = "repeat"  // a block doubled: an offence soon after the last
	kindDropped = "dropped" // an offence memory had no room for
)

type metrics struct {
	reg         prometheus.Registerer
	penalties   *prometheus.CounterVec
	storeErrors *prometheus.CounterVec
}

func (m *metrics) register() error {
	m.penalties = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "unkey_ratelimit_penalties_total",
		Help: "Penalty blocks started by this process, by kind: first, repeat (doubled), dropped (memory full)."}, []string{"kind"})
	m.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "unkey_ratelimit_penalty_store_errors_total",
		Help: "Penalty store operations that failed or were refused, by operation: write, poll, queue_full."}, []string{"op"})
	for _, k := range []string{kindFirst, kindRepeat, kindDropped} {
		m.penalties.WithLabelValues(k)
	}
	for _, op := range []string{"write", "poll", "queue_full"} {
		m.storeErrors.WithLabelValues(op)
	}
	if m.reg == nil {
		m.reg = prometheus.NewRegistry()
	}
	for _, c := range []prometheus.Collector{m.penalties, m.storeErrors} {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

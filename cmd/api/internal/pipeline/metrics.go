package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the API's Prometheus metrics. Labels take only the fixed
// values below; workspaces and identifiers never become labels.
type metrics struct {
	decisions *prometheus.CounterVec
	// resolved counters for the four label combinations, so a request does
	// not look its counter up.
	limitPassed, limitDenied, multiPassed, multiDenied prometheus.Counter
	// settlements counts settles by result.
	settlements *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "unkey_ratelimit_decisions_total",
		Help: "Rate limit decisions by RPC (Limit, MultiLimit; each entry of a BatchLimit counts as a Limit) and outcome (passed, denied).",
	}, []string{"rpc", "outcome"})
	if err := reg.Register(decisions); err != nil {
		return nil, err
	}
	settlements := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "unkey_ratelimit_settlements_total",
		Help: "Reservations settled, by result: refunded (cost below the estimate), exact, reported (cost above it: the rest counted), repeated (settled before: refused), unrecorded (the ledger failed: nothing given back, any cost beyond the estimate counted).",
	}, []string{"result"})
	for _, r := range []string{settleRefunded, settleExact, settleReported, settleRepeated, settleUnrecorded} {
		settlements.WithLabelValues(r)
	}
	if err := reg.Register(settlements); err != nil {
		return nil, err
	}
	return &metrics{
		decisions:   decisions,
		settlements: settlements,
		limitPassed: decisions.WithLabelValues("Limit", "passed"),
		limitDenied: decisions.WithLabelValues("Limit", "denied"),
		multiPassed: decisions.WithLabelValues("MultiLimit", "passed"),
		multiDenied: decisions.WithLabelValues("MultiLimit", "denied"),
	}, nil
}

// decision counts one decision of rpc.
func (m *metrics) decision(rpc string, passed bool) {
	switch {
	case rpc == "Limit" && passed:
		m.limitPassed.Inc()
	case rpc == "Limit":
		m.limitDenied.Inc()
	case passed:
		m.multiPassed.Inc()
	default:
		m.multiDenied.Inc()
	}
}

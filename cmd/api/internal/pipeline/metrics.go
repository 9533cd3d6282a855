package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// metrics are the API's Prometheus metrics. Labels take only the fixed
// values below; workspaces and identifiers never become labels.
type metrics struct {
	decisions *prometheus.CounterVec
	// resolved counters by RPC (Limit, MultiLimit) and outcome, so a
	// request does not look its counter up.
	limit, multi [len(outcomeNames)]prometheus.Counter
	// settlements counts settles by result.
	settlements *prometheus.CounterVec
	// leases counts acquisitions, releases and extensions by outcome.
	leases *prometheus.CounterVec
	// byModel counts each limit decided by its model and outcome:
	// [model][outcome], resolved at start.
	byModel [len(modelNames)][len(outcomeNames)]prometheus.Counter
	// booked counts the admissions booked ahead (max_wait), and
	// bookedSeconds the waits they were answered.
	booked, bookedSeconds prometheus.Counter
}

// modelNames name the models in unkey_ratelimit_limits_decided_total, by
// ratelimit.Algorithm, and the calendar's last.
var modelNames = [...]string{"sliding_window", "fixed_window", "token_bucket", "concurrency", "calendar"}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "unkey_ratelimit_decisions_total",
		Help: "Rate limit decisions by RPC (Limit, MultiLimit; each entry of a BatchLimit counts as a Limit) and outcome (passed, denied, shadow_denied: a shadow request its limit would have refused, admitted).",
	}, []string{"rpc", "outcome"})
	if err := reg.Register(decisions); err != nil {
		return nil, err
	}
	settlements := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "unkey_ratelimit_settlements_total",
		Help: "Reservations settled, by result: refunded (cost below the estimate), exact, reported (cost above it: the rest counted), repeated (settled before: refused), unrecorded (the ledger failed: nothing given back, any cost beyond the estimate counted).",
	}, []string{"result"})
	limits := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "unkey_ratelimit_limits_decided_total",
		Help: "Limits decided (a Limit, each entry of a batch, an Acquire or an Extend), by model (sliding_window, fixed_window, token_bucket, concurrency, calendar) and outcome (passed, denied, shadow_denied).",
	}, []string{"model", "outcome"})
	if err := reg.Register(limits); err != nil {
		return nil, err
	}
	for _, r := range []string{settleRefunded, settleExact, settleReported, settleRepeated, settleUnrecorded} {
		settlements.WithLabelValues(r)
	}
	if err := reg.Register(settlements); err != nil {
		return nil, err
	}
	leases := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "unkey_ratelimit_leases_total",
		Help: "Leases of concurrency limits by outcome: acquired, denied (no slot free), extended, released, repeated (released or extended before: nothing freed), expired (released or extended after its slots freed themselves), unrecorded (the ledger failed: nothing freed, the slots free themselves at expiry).",
	}, []string{"outcome"})
	for _, o := range []string{leaseAcquired, leaseDenied, leaseExtended, leaseReleased, leaseRepeated, leaseExpired, leaseUnrecord} {
		leases.WithLabelValues(o)
	}
	if err := reg.Register(leases); err != nil {
		return nil, err
	}
	booked := prometheus.NewCounter(prometheus.CounterOpts{Name: "unkey_ratelimit_booked_waits_total",
		Help: "Admissions booked ahead (max_wait): counted now, answered with the wait before their caller proceeds. Also counted as passed."})
	bookedSeconds := prometheus.NewCounter(prometheus.CounterOpts{Name: "unkey_ratelimit_booked_wait_seconds_total",
		Help: "The waits booked admissions were answered, summed: over unkey_ratelimit_booked_waits_total, the mean wait."})
	for _, c := range []prometheus.Collector{booked, bookedSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m := &metrics{decisions: decisions, settlements: settlements, leases: leases, booked: booked, bookedSeconds: bookedSeconds}
	for o, name := range outcomeNames {
		m.limit[o] = decisions.WithLabelValues("Limit", name)
		if outcome(o) != outcomeShadowDenied { // a MultiLimit is passed or denied
			m.multi[o] = decisions.WithLabelValues("MultiLimit", name)
		}
		for i, model := range modelNames {
			m.byModel[i][o] = limits.WithLabelValues(model, name)
		}
	}
	return m, nil
}

// limitDecided counts one limit of r decided, with outcome o.
func (m *metrics) limitDecided(r *ratelimit.Request, o outcome) {
	model := min(int(r.Algorithm), len(modelNames)-2)
	if !r.Calendar.IsZero() {
		model = len(modelNames) - 1
	}
	m.byModel[model][o].Inc()
}

// decision counts one decision of rpc (Limit or MultiLimit), with outcome
// o.
func (m *metrics) decision(rpc string, o outcome) {
	if rpc == "Limit" {
		m.limit[o].Inc()
		return
	}
	m.multi[o].Inc()
}

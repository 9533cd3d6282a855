package rlqs

import (
	"errors"
	"fmt"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/access"
)

// metrics are the service's series. Every label takes a fixed set of
// values: no caller's name (domain, bucket) becomes one.
type metrics struct {
	assignments *prometheus.CounterVec // by strategy
	abandoned   prometheus.Counter
	refusals    *prometheus.CounterVec // by reason
	// tokenBucket, allowAll, denyAll and expire are the assignments'
	// counters, and allowed and denied the reported requests', resolved
	// once: every report counts into them.
	tokenBucket, allowAll, denyAll, expire prometheus.Counter
	allowed, denied                        prometheus.Counter
}

// refusalReasons are the reasons a stream is refused or ended.
var refusalReasons = []string{"streams_per_connection", "streams_per_workspace", "buckets_per_stream", "buckets_per_workspace", "draining", "denied", "invalid"}

func newMetrics(reg prometheus.Registerer, s *Service) (*metrics, error) {
	m := &metrics{
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unkey_rlqs_assignments_total",
			Help: "Quota assignments sent to Envoys, by strategy: token_bucket, allow_all, deny_all, and expire (a time to live of 0, sent as the server drains).",
		}, []string{"strategy"}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unkey_rlqs_abandoned_total",
			Help: "Quota buckets Envoys were told to abandon, having reported no request for UNKEY_RLQS_ABANDON_AFTER.",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unkey_rlqs_refused_total",
			Help: "Quota streams refused or ended by the server, by reason: streams_per_connection, streams_per_workspace, buckets_per_stream, buckets_per_workspace (a bound), draining (the server shuts down), denied (a key that may not decide the domain's limits), invalid (a report that breaks a rule).",
		}, []string{"reason"}),
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "unkey_rlqs_reported_requests_total",
		Help: "Requests Envoys reported on their quota streams, by verdict: allowed (counted as hits of the bucket's limit) or denied (by the Envoy, enforcing its assignment).",
	}, []string{"verdict"})
	m.tokenBucket, m.allowAll = m.assignments.WithLabelValues("token_bucket"), m.assignments.WithLabelValues("allow_all")
	m.denyAll, m.expire = m.assignments.WithLabelValues("deny_all"), m.assignments.WithLabelValues("expire")
	m.allowed, m.denied = requests.WithLabelValues("allowed"), requests.WithLabelValues("denied")
	for _, r := range refusalReasons {
		m.refusals.WithLabelValues(r)
	}
	streams := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "unkey_rlqs_streams",
		Help: "Quota streams open now.",
	}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.streams))
	})
	buckets := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "unkey_rlqs_buckets",
		Help: "Quota buckets the open streams report, each stream's counted apart.",
	}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		var n int
		for _, c := range s.workspaces {
			n += c
		}
		return float64(n)
	})
	for _, c := range []prometheus.Collector{m.assignments, m.abandoned, m.refusals, requests, streams, buckets} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register quota service metrics: %w", err)
		}
	}
	return m, nil
}

// sent counts the actions of resp.
func (m *metrics) sent(resp *rlqsv3.RateLimitQuotaResponse) {
	for _, a := range resp.GetBucketAction() {
		if a.GetAbandonAction() != nil {
			m.abandoned.Inc()
			continue
		}
		q := a.GetQuotaAssignmentAction()
		switch {
		case q.GetAssignmentTimeToLive().AsDuration() == 0:
			m.expire.Inc()
		case q.GetRateLimitStrategy().GetTokenBucket() != nil:
			m.tokenBucket.Inc()
		case q.GetRateLimitStrategy().GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
			m.denyAll.Inc()
		default:
			m.allowAll.Inc()
		}
	}
}

// refused counts a stream ended by err, a report's failure: a bound's
// reason, a denial, or invalid.
func (m *metrics) refused(err error) {
	var r *refusal
	var denial *access.DeniedError
	switch {
	case errors.As(err, &r):
		m.refusedFor(r.reason)
	case errors.As(err, &denial):
		m.refusedFor("denied")
	default:
		m.refusedFor("invalid")
	}
}

func (m *metrics) refusedFor(reason string) { m.refusals.WithLabelValues(reason).Inc() }

// reported counts a bucket's reported requests.
func (m *metrics) reported(allowed, denied uint64) {
	m.allowed.Add(float64(allowed))
	m.denied.Add(float64(denied))
}

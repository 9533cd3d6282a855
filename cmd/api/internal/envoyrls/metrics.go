package envoyrls

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// metrics are the statistics envoyproxy/ratelimit's users look for, per
// domain and rule, counted in hits (a request's hits_addend). The rule
// label is the rule's path in the configuration, so there is one series
// per rule of the files; only rules with detailed_metric (or levels with
// value_to_metric) put the request's values into it, as their authors ask.
type metrics struct {
	total, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec
	globalShadow                                         prometheus.Counter
	// nearRatio: a hit that leaves less than (1 - nearRatio) of the limit
	// is near it (UNKEY_RLS_NEAR_LIMIT_RATIO, 0.8 as in envoyproxy/ratelimit).
	nearRatio float64

	// seriesMu guards series and perRule: per rule and workspace, the
	// labels with the request's values already in use (at most
	// maxSeriesPerRule), and per rule how many in all (at most
	// maxSeriesPerRuleAll).
	seriesMu sync.Mutex
	series   map[ruleWorkspace]map[string]struct{}
	perRule  map[*rlsconfig.Rule]int
}

// ruleWorkspace is a rule as one workspace's calls use it.
type ruleWorkspace struct {
	rule      *rlsconfig.Rule
	workspace string
}

// descriptorLimitMetric is the rule label of every descriptor-level limit.
const descriptorLimitMetric = "descriptor_limit"

// Bounds of the labels a request's values make (detailed_metric,
// value_to_metric): a rule's label takes at most maxSeriesPerRule distinct
// values of each workspace's calls, and maxSeriesPerRuleAll of every
// workspace's together, then its overflow label; no label is longer than
// maxLabelBytes. Series then grow with the operator's files, not with what
// callers send, and one workspace's values cannot push another's into the
// overflow.
const (
	maxSeriesPerRule    = 100
	maxSeriesPerRuleAll = 1000
	maxLabelBytes       = 256
)

// label returns the rule label of p's hits, a call of workspace: the
// rule's path, or the label with the request's values its file asks for,
// within the bounds above.
func (m *metrics) label(p *plan, workspace string) string {
	if p.rule == nil || p.metric == p.rule.Path {
		return p.metric
	}
	l := p.metric
	if len(l) > maxLabelBytes {
		l = strings.ToValidUTF8(l[:maxLabelBytes], "") + "…"
	}
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	k := ruleWorkspace{p.rule, workspace}
	seen := m.series[k]
	if _, ok := seen[l]; ok {
		return l
	}
	if len(seen) >= maxSeriesPerRule || m.perRule[p.rule] >= maxSeriesPerRuleAll {
		return p.rule.Path + "_overflow"
	}
	if seen == nil {
		seen = map[string]struct{}{}
		m.series[k] = seen
	}
	seen[l] = struct{}{}
	m.perRule[p.rule]++
	return l
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"domain", "rule"})
	}
	m := &metrics{
		total:       vec("unkey_rls_hits_total", "Hits of descriptors that matched a rule of Envoy's rate limit service, by domain and rule."),
		overLimit:   vec("unkey_rls_over_limit_total", "Hits over their rule's limit (shadow-mode rules included)."),
		nearLimit:   vec("unkey_rls_near_limit_total", "Hits within their rule's limit that left less than 1 - UNKEY_RLS_NEAR_LIMIT_RATIO of it."),
		withinLimit: vec("unkey_rls_within_limit_total", "Hits within their rule's limit."),
		shadowMode:  vec("unkey_rls_shadow_mode_total", "Hits over the limit of a shadow_mode rule, answered OK."),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{Name: "unkey_rls_global_shadow_mode_total",
			Help: "Requests over a limit answered OK because UNKEY_RLS_SHADOW_MODE is on."}),
		nearRatio: 0.8,
		series:    map[ruleWorkspace]map[string]struct{}{},
		perRule:   map[*rlsconfig.Rule]int{},
	}
	for _, c := range []prometheus.Collector{m.total, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode, m.globalShadow} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) hits(domain, rule string, n int64) {
	m.total.WithLabelValues(domain, rule).Add(float64(n))
}
func (m *metrics) over(domain, rule string, n int64) {
	m.overLimit.WithLabelValues(domain, rule).Add(float64(n))
}
func (m *metrics) near(domain, rule string, n int64) {
	m.nearLimit.WithLabelValues(domain, rule).Add(float64(n))
}
func (m *metrics) within(domain, rule string, n int64) {
	m.withinLimit.WithLabelValues(domain, rule).Add(float64(n))
}
func (m *metrics) shadowHits(domain, rule string, n int64) {
	m.shadowMode.WithLabelValues(domain, rule).Add(float64(n))
}

// isNear reports whether remaining is under (1 - nearRatio) of limit.
func (m *metrics) isNear(limit, remaining int64) bool {
	return float64(limit-remaining) > m.nearRatio*float64(limit)
}

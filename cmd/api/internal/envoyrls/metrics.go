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
	// upstream are the same counts under envoyproxy/ratelimit's names and
	// labels (ratelimit_service_rate_limit_*, by domain, key1 and key2, as
	// its statsd mapping to Prometheus publishes them), which Envoy
	// Gateway's dashboards query.
	upstream     [5]*prometheus.CounterVec
	globalShadow prometheus.Counter
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

// label sets p's labels for a call of workspace: the rule's path and
// levels, or the labels with the request's values its file asks for,
// within the bounds above (past them, the rule's path with "_overflow",
// and its levels).
func (m *metrics) label(p *plan, workspace string) {
	if p.rule == nil || p.metric == p.rule.Path {
		return
	}
	l := truncateLabel(p.metric)
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	k := ruleWorkspace{p.rule, workspace}
	seen := m.series[k]
	if _, ok := seen[l]; !ok {
		if len(seen) >= maxSeriesPerRule || m.perRule[p.rule] >= maxSeriesPerRuleAll {
			p.metric, p.keys = p.rule.Path+"_overflow", p.rule.Keys
			return
		}
		if seen == nil {
			seen = map[string]struct{}{}
			m.series[k] = seen
		}
		seen[l] = struct{}{}
		m.perRule[p.rule]++
	}
	// The keys are parts of the label: bounded with it.
	p.metric, p.keys = l, [2]string{truncateLabel(p.keys[0]), truncateLabel(p.keys[1])}
}

// truncateLabel cuts a label to maxLabelBytes, marking the cut.
func truncateLabel(l string) string {
	if len(l) > maxLabelBytes {
		return strings.ToValidUTF8(l[:maxLabelBytes], "") + "…"
	}
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
	for i, stat := range [][2]string{{"total_hits", "unkey_rls_hits_total"}, {"over_limit", "unkey_rls_over_limit_total"},
		{"near_limit", "unkey_rls_near_limit_total"}, {"within_limit", "unkey_rls_within_limit_total"},
		{"shadow_mode", "unkey_rls_shadow_mode_total"}} {
		m.upstream[i] = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + stat[0],
			Help: "envoyproxy/ratelimit's " + stat[0] + " statistic, in hits, by domain and the rule's first two levels (key1, key2): " +
				"the count of " + stat[1] + " under envoyproxy/ratelimit's name."}, []string{"domain", "key1", "key2"})
	}
	for _, c := range []prometheus.Collector{m.total, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode, m.globalShadow,
		m.upstream[0], m.upstream[1], m.upstream[2], m.upstream[3], m.upstream[4]} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// The counts of p's hits, in domain, under both names.
func (m *metrics) hits(domain string, p *plan)   { m.add(m.total, 0, domain, p) }
func (m *metrics) over(domain string, p *plan)   { m.add(m.overLimit, 1, domain, p) }
func (m *metrics) near(domain string, p *plan)   { m.add(m.nearLimit, 2, domain, p) }
func (m *metrics) within(domain string, p *plan) { m.add(m.withinLimit, 3, domain, p) }
func (m *metrics) shadowHits(domain string, p *plan) {
	m.add(m.shadowMode, 4, domain, p)
}

func (m *metrics) add(ours *prometheus.CounterVec, upstream int, domain string, p *plan) {
	ours.WithLabelValues(domain, p.metric).Add(float64(p.cost))
	m.upstream[upstream].WithLabelValues(domain, p.keys[0], p.keys[1]).Add(float64(p.cost))
}

// isNear reports whether remaining is under (1 - nearRatio) of limit.
func (m *metrics) isNear(limit, remaining int64) bool {
	return float64(limit-remaining) > m.nearRatio*float64(limit)
}

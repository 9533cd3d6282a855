package envoyrls

import (
	"strings"
	"sync"
	"sync/atomic"

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
	perRule  map[string]int

	// counters holds, per rule of the configuration in force, the ten
	// counters of its own label, so that a hit of a rule with a fixed
	// label (most) adds to them without hashing its labels; a new
	// configuration starts a new cache.
	counters atomic.Pointer[counterCache]
}

// counterCache is the counters of one configuration's rules.
type counterCache struct {
	config *rlsconfig.Config
	rules  sync.Map // *rlsconfig.Rule → *ruleCounters
}

// ruleCounters are a rule's counters by statistic (hits, over, near,
// within, shadow), under both names.
type ruleCounters struct{ ours, upstream [5]prometheus.Counter }

// ruleWorkspace is a rule (by its path, which names it across reloads) as
// one workspace's calls use it.
type ruleWorkspace struct {
	rule      string
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
	k := ruleWorkspace{p.rule.Path, workspace}
	seen := m.series[k]
	if _, ok := seen[l]; !ok {
		if len(seen) >= maxSeriesPerRule || m.perRule[p.rule.Path] >= maxSeriesPerRuleAll {
			p.metric, p.keys = p.rule.Path+"_overflow", p.rule.Keys
			return
		}
		if seen == nil {
			seen = map[string]struct{}{}
			m.series[k] = seen
		}
		seen[l] = struct{}{}
		m.perRule[p.rule.Path]++
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
		perRule:   map[string]int{},
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
func (m *metrics) hits(domain string, p *plan)   { m.add(0, domain, p) }
func (m *metrics) over(domain string, p *plan)   { m.add(1, domain, p) }
func (m *metrics) near(domain string, p *plan)   { m.add(2, domain, p) }
func (m *metrics) within(domain string, p *plan) { m.add(3, domain, p) }
func (m *metrics) shadowHits(domain string, p *plan) {
	m.add(4, domain, p)
}

// vecs are this service's counters by statistic, in ruleCounters' order.
func (m *metrics) vecs() [5]*prometheus.CounterVec {
	return [5]*prometheus.CounterVec{m.total, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode}
}

func (m *metrics) add(stat int, domain string, p *plan) {
	n := float64(p.cost)
	if c := m.cached(domain, p); c != nil {
		c.ours[stat].Add(n)
		c.upstream[stat].Add(n)
		return
	}
	m.vecs()[stat].WithLabelValues(domain, p.metric).Add(n)
	m.upstream[stat].WithLabelValues(domain, p.keys[0], p.keys[1]).Add(n)
}

// inForce starts a new cache of counters when cfg is not the
// configuration the cache is of.
func (m *metrics) inForce(cfg *rlsconfig.Config) {
	if c := m.counters.Load(); c == nil || c.config != cfg {
		m.counters.Store(&counterCache{config: cfg})
	}
}

// cached returns the counters of p's rule, where p is labelled by its
// rule alone (not by the request's values), else nil.
func (m *metrics) cached(domain string, p *plan) *ruleCounters {
	cache := m.counters.Load()
	if p.rule == nil || p.metric != p.rule.Path || cache == nil {
		return nil
	}
	if c, ok := cache.rules.Load(p.rule); ok {
		return c.(*ruleCounters)
	}
	c := &ruleCounters{}
	for i, v := range m.vecs() {
		c.ours[i] = v.WithLabelValues(domain, p.metric)
		c.upstream[i] = m.upstream[i].WithLabelValues(domain, p.keys[0], p.keys[1])
	}
	actual, _ := cache.rules.LoadOrStore(p.rule, c)
	return actual.(*ruleCounters)
}

// isNear reports whether remaining is under (1 - nearRatio) of limit.
func (m *metrics) isNear(limit, remaining int64) bool {
	return float64(limit-remaining) > m.nearRatio*float64(limit)
}

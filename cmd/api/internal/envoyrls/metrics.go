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
// per rule of the configuration; only rules with detailed_metric (or
// levels with value_to_metric) put the request's values into it, as their
// authors ask.
type metrics struct {
	// ours are the counts by statistic, by domain and rule; upstream the
	// same counts under envoyproxy/ratelimit's names and labels
	// (ratelimit_service_rate_limit_*, by domain, key1 and key2, as its
	// statsd mapping to Prometheus publishes them), which Envoy Gateway's
	// dashboards query.
	ours, upstream [stats]*prometheus.CounterVec
	globalShadow   prometheus.Counter
	// inFlight is, by domain and rule (its path), the slots of a
	// concurrency rule held as its latest acquisition, release or
	// give-back (of a refused request) saw them; badReleases counts lease
	// ids whose release failed: not issued by this service (to the
	// workspace, for the domain), changed, empty, or a store that failed.
	inFlight    *prometheus.GaugeVec
	badReleases prometheus.Counter
	// refunded counts the hits negative hits gave back (see refund).
	refunded prometheus.Counter
	// nearRatio: a hit that leaves less than (1 - nearRatio) of the limit
	// is near it (UNKEY_RLS_NEAR_LIMIT_RATIO, 0.8 as in envoyproxy/ratelimit).
	nearRatio float64

	// seriesMu guards rules: by rule path (which names a rule across
	// reloads), the series the rule has made; and pruned, the newest
	// configuration whose removed rules' series were dropped (nil before
	// the first): a request on an older configuration adds nothing to the
	// series of a rule pruned has not (see unseen).
	seriesMu sync.Mutex
	rules    map[string]*ruleSeries
	pruned   *rlsconfig.Config

	// counters is the cache of the newest configuration seen (see
	// cacheFor).
	counters atomic.Pointer[counterCache]
}

// seriesLabels are one series' labels under both names: domain and rule,
// domain, key1 and key2.
type seriesLabels struct{ domain, rule, key1, key2 string }

// ruleSeries are the series of one rule.
type ruleSeries struct {
	// all holds every series the rule made: its own, and those with the
	// request's values.
	all map[seriesLabels]struct{}
	// valued counts those of all with the request's values (at most
	// maxSeriesPerRuleAll); workspaces holds them by the workspace whose
	// calls made them (at most maxSeriesPerRule each).
	valued     int
	workspaces map[string]map[seriesLabels]struct{}
}

// counterCache holds, per rule of one configuration, the ten counters of
// its own labels, so that a hit of a rule labelled by its path (most)
// adds to them without hashing its labels.
type counterCache struct {
	config *rlsconfig.Config
	rules  sync.Map // *rlsconfig.Rule → *ruleCounters
}

// The statistics, in the order of metrics.ours and metrics.upstream.
const (
	statHits = iota
	statOver
	statNear
	statWithin
	statShadow
	stats
)

// ruleCounters are a rule's counters by statistic, under both names.
type ruleCounters struct{ ours, upstream [stats]prometheus.Counter }

// descriptorLimitMetric is the rule label of every descriptor-level limit.
const descriptorLimitMetric = "descriptor_limit"

// Bounds of the labels a request's values make (detailed_metric,
// value_to_metric): a rule takes at most maxSeriesPerRule distinct series
// of each workspace's calls, and maxSeriesPerRuleAll of every workspace's
// together, then its overflow label; no label is longer than
// maxLabelBytes. Series then grow with the operator's rules, not with what
// callers send, and one workspace's values cannot push another's into the
// overflow. A rule that leaves the configuration takes its series with it.
const (
	maxSeriesPerRule    = 100
	maxSeriesPerRuleAll = 1000
	maxLabelBytes       = 256
)

// rule returns the series of the rule at path, under seriesMu.
func (m *metrics) rule(path string) *ruleSeries {
	rs := m.rules[path]
	if rs == nil {
		rs = &ruleSeries{all: map[seriesLabels]struct{}{}, workspaces: map[string]map[seriesLabels]struct{}{}}
		m.rules[path] = rs
	}
	return rs
}

// label sets p's labels for a call of workspace in domain: the rule's path
// and levels, or the labels with the request's values its file asks for,
// within the bounds above (past them, the rule's path with "_overflow",
// and its levels). The bound counts series, all three labels together.
func (m *metrics) label(domain string, p *plan, workspace string) {
	if p.rule == nil || p.metric == p.rule.Path {
		return
	}
	sl := seriesLabels{domain: domain, rule: truncateLabel(p.metric), key1: truncateLabel(p.keys[0]), key2: truncateLabel(p.keys[1])}
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	if m.unseen(p) {
		return
	}
	rs := m.rule(p.rule.Path)
	ws := rs.workspaces[workspace]
	if _, ok := ws[sl]; !ok {
		_, known := rs.all[sl]
		if len(ws) >= maxSeriesPerRule || (!known && rs.valued >= maxSeriesPerRuleAll) {
			sl = seriesLabels{domain: domain, rule: p.rule.Path + "_overflow", key1: p.rule.Keys[0], key2: p.rule.Keys[1]}
			rs.all[sl] = struct{}{}
			p.metric, p.keys = sl.rule, [2]string{sl.key1, sl.key2}
			return
		}
		if ws == nil {
			ws = map[seriesLabels]struct{}{}
			rs.workspaces[workspace] = ws
		}
		ws[sl] = struct{}{}
		if !known {
			rs.all[sl] = struct{}{}
			rs.valued++
		}
	}
	p.metric, p.keys = sl.rule, [2]string{sl.key1, sl.key2}
}

// truncateLabel cuts a label to maxLabelBytes, marking the cut.
func truncateLabel(l string) string {
	if len(l) > maxLabelBytes {
		return strings.ToValidUTF8(l[:maxLabelBytes], "") + "…"
	}
	return l
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{Name: "unkey_rls_global_shadow_mode_total",
			Help: "Requests over a limit answered OK because UNKEY_RLS_SHADOW_MODE is on."}),
		nearRatio: 0.8,
		rules:     map[string]*ruleSeries{},
	}
	m.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "unkey_rls_in_flight",
		Help: "Slots of a concurrency rule held, by domain and rule, as the rule's latest acquisition, release or give-back (of a request another rule refused) saw them (of its latest descriptor's counter)."},
		[]string{"domain", "rule"})
	m.badReleases = prometheus.NewCounter(prometheus.CounterOpts{Name: "unkey_rls_bad_releases_total",
		Help: "Lease ids in release descriptors whose release failed: not issued by this service to the workspace for the domain, changed, empty, or a store that failed."})
	m.refunded = prometheus.NewCounter(prometheus.CounterOpts{Name: "unkey_rls_negative_hits_total",
		Help: "Hits Envoy's negative hits (is_negative_hits) gave back to the limits they were counted in: no more than each window held."})
	collectors := []prometheus.Collector{m.globalShadow, m.inFlight, m.badReleases, m.refunded}
	for i, stat := range [stats]struct{ ours, help, upstream string }{
		statHits:   {"unkey_rls_hits_total", "Hits of descriptors that matched a rule of Envoy's rate limit service, by domain and rule.", "total_hits"},
		statOver:   {"unkey_rls_over_limit_total", "Hits over their rule's limit (shadow-mode rules included).", "over_limit"},
		statNear:   {"unkey_rls_near_limit_total", "Hits within their rule's limit that left less than 1 - UNKEY_RLS_NEAR_LIMIT_RATIO of it.", "near_limit"},
		statWithin: {"unkey_rls_within_limit_total", "Hits within their rule's limit.", "within_limit"},
		statShadow: {"unkey_rls_shadow_mode_total", "Hits over the limit of a shadow_mode rule, answered OK.", "shadow_mode"},
	} {
		m.ours[i] = prometheus.NewCounterVec(prometheus.CounterOpts{Name: stat.ours, Help: stat.help}, []string{"domain", "rule"})
		m.upstream[i] = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + stat.upstream,
			Help: "envoyproxy/ratelimit's " + stat.upstream + " statistic, in hits, by domain and the rule's first two levels (key1, key2): " +
				"the count of " + stat.ours + " under envoyproxy/ratelimit's name."}, []string{"domain", "key1", "key2"})
		collectors = append(collectors, m.ours[i], m.upstream[i])
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// The counts of p's hits, in domain, under both names.
func (m *metrics) hits(domain string, p *plan)       { m.add(statHits, domain, p) }
func (m *metrics) over(domain string, p *plan)       { m.add(statOver, domain, p) }
func (m *metrics) near(domain string, p *plan)       { m.add(statNear, domain, p) }
func (m *metrics) within(domain string, p *plan)     { m.add(statWithin, domain, p) }
func (m *metrics) shadowHits(domain string, p *plan) { m.add(statShadow, domain, p) }

func (m *metrics) add(stat int, domain string, p *plan) {
	n := float64(p.cost)
	c := m.cached(domain, p)
	if p.silent {
		return
	}
	if c != nil {
		c.ours[stat].Add(n)
		c.upstream[stat].Add(n)
		return
	}
	m.ours[stat].WithLabelValues(domain, p.metric).Add(n)
	m.upstream[stat].WithLabelValues(domain, p.keys[0], p.keys[1]).Add(n)
}

// cacheFor returns the counter cache of cfg, the configuration a request
// read. The newest configuration seen has the cache; the first request
// that reads a newer one drops the series of the rules it no longer has,
// then publishes its cache. A request that read an older one (a reload
// happened meanwhile) gets a cache of its own, for that request.
func (m *metrics) cacheFor(cfg *rlsconfig.Config) *counterCache {
	for {
		c := m.counters.Load()
		if c != nil && c.config == cfg {
			return c
		}
		if c != nil && c.config.Newer(cfg) {
			return &counterCache{config: cfg}
		}
		m.prune(cfg)
		next := &counterCache{config: cfg}
		if m.counters.CompareAndSwap(c, next) {
			return next
		}
	}
}

// prune drops the series of the rules cfg no longer has, keeping any
// series a remaining rule also uses, unless a configuration as new was
// pruned already.
func (m *metrics) prune(cfg *rlsconfig.Config) {
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	if m.pruned != nil && !cfg.Newer(m.pruned) {
		return
	}
	m.pruned = cfg
	kept := map[seriesLabels]bool{} // a remaining rule's, by its labels under each name
	var gone []seriesLabels
	for path, rs := range m.rules {
		if cfg.HasRule(path) {
			for sl := range rs.all {
				kept[seriesLabels{domain: sl.domain, rule: sl.rule}] = true
				kept[seriesLabels{domain: sl.domain, key1: sl.key1, key2: sl.key2}] = true
			}
			continue
		}
		for sl := range rs.all {
			gone = append(gone, sl)
		}
		delete(m.rules, path)
		m.inFlight.DeletePartialMatch(prometheus.Labels{"rule": truncateLabel(path)})
	}
	for _, sl := range gone {
		if !kept[seriesLabels{domain: sl.domain, rule: sl.rule}] {
			for _, v := range m.ours {
				v.DeleteLabelValues(sl.domain, sl.rule)
			}
		}
		if !kept[seriesLabels{domain: sl.domain, key1: sl.key1, key2: sl.key2}] {
			for _, v := range m.upstream {
				v.DeleteLabelValues(sl.domain, sl.key1, sl.key2)
			}
		}
	}
}

// unseen reports, under seriesMu, whether p's rule is gone from the newest
// configuration pruned: a request that read an older one then counts its
// hits in no series, rather than bring back a removed rule's.
func (m *metrics) unseen(p *plan) bool {
	if m.pruned == nil || m.pruned.HasRule(p.rule.Path) {
		return false
	}
	p.silent = true
	return true
}

// cached returns the counters of p's rule from p's cache, where p is
// labelled by its rule alone (not by the request's values), else nil.
// The counters are made and the rule's series recorded in one step under
// seriesMu, so that a prune sees either both or neither.
func (m *metrics) cached(domain string, p *plan) *ruleCounters {
	if p.rule == nil || p.metric != p.rule.Path || p.cache == nil {
		return nil
	}
	if c, ok := p.cache.rules.Load(p.rule); ok {
		return c.(*ruleCounters)
	}
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	if m.unseen(p) {
		return nil
	}
	c := &ruleCounters{}
	for i, v := range m.ours {
		c.ours[i] = v.WithLabelValues(domain, p.metric)
		c.upstream[i] = m.upstream[i].WithLabelValues(domain, p.keys[0], p.keys[1])
	}
	m.rule(p.rule.Path).all[seriesLabels{domain: domain, rule: p.metric, key1: p.keys[0], key2: p.keys[1]}] = struct{}{}
	actual, _ := p.cache.rules.LoadOrStore(p.rule, c)
	return actual.(*ruleCounters)
}

// isNear reports whether remaining is under (1 - nearRatio) of limit.
func (m *metrics) isNear(limit, remaining int64) bool {
	return float64(limit-remaining) > m.nearRatio*float64(limit)
}

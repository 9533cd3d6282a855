// Package envoyrls is the adapter of Envoy's rate limit service
// (envoy.service.ratelimit.v3), as envoyproxy/ratelimit serves it, onto the
// request pipeline: Envoy, Istio, Envoy Gateway and the other gateways
// built on Envoy call ShouldRateLimit once per request with the
// descriptors their route produces. The rules come from envoyproxy/
// ratelimit's YAML files or its xDS resources (package rlsconfig); a
// descriptor may carry several limits. What differs: a rule's window
// slides unless it names another model (algorithm: fixed_window,
// token_bucket, concurrency; a calendar unit), and the counters converge
// through Redis and MySQL like every other. As there, a hit is counted whether or
// not it is over its limit (WithOverLimitHitsCounted turns that off).
//
// Counters: a descriptor of domain D is counted in namespace "envoy:D"
// under the identifier rlsconfig gives (its entries as key=value,
// comma-joined and escaped), in a window per limit of the rule (its unit
// times its multiplier). An override set on that namespace and identifier
// (or a pattern) replaces the rule's limits with its one, as for any other
// counter.
//
// The service is served on three transports (transport.go): gRPC,
// gRPC-Web and Connect through connect-go on the main port, gRPC through
// grpc-go on UNKEY_GRPC_ADDR, and envoyproxy/ratelimit's POST /json. The
// shared HTTP layer (package transport) authenticates, caps and recovers;
// the gRPC transports answer failures by its gRPC table, /json by
// jsonStatus.
package envoyrls

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/internal/ratelimitheader"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// Bounds of a ShouldRateLimit request. Envoy sends one descriptor per
// rate_limits action of the route, typically one to five, each of a few
// entries of header values, addresses and route names.
const (
	MaxDescriptors = 100
	MaxEntries     = 32
	// MaxEntryBytes bounds an entry's key and its value, each: a header
	// value (a user agent, a JWT claim) fits.
	MaxEntryBytes = 1024
	// MaxReleaseBytes bounds the value of a release's entry (see
	// ReleaseKey): the lease ids of a request's concurrency rules, each at
	// most about 1,100 characters (a 255-character namespace and
	// identifier), most about 150.
	MaxReleaseBytes = 8192
	// MaxReleaseIDs bounds the lease ids of a request's release entries
	// altogether: a request-path call acquires at most one lease a
	// descriptor, so a stream-done call that releases them carries at
	// most MaxDescriptors. More would be work (a ledger claim each) that
	// no request asked for.
	MaxReleaseIDs = MaxDescriptors
	// MaxIdentifier bounds a descriptor's counter name, its entries
	// written out (see rlsconfig.Identifier), in characters: what a
	// decision does with it (the digest of a long one, the override
	// patterns tried against it) costs in proportion to it.
	MaxIdentifier = 4096
)

// The bounds of the calls the adapter makes: an operator's rule's (a
// year's window, a limit of 0 that blocks), and a request's own limit's,
// a caller's; both with counter names as long as a descriptor's.
var (
	operatorBounds = func() ratelimit.Bounds {
		b := ratelimit.OperatorBounds
		b.MaxIdentifier = MaxIdentifier
		return b
	}()
	callerBounds = ratelimit.Bounds{MaxIdentifier: MaxIdentifier}
)

// Service answers ShouldRateLimit on a pipeline.
type Service struct {
	layer    *transport.Layer
	pipeline *pipeline.Pipeline
	config   func() *rlsconfig.Config
	metrics  *metrics
	// shadow answers OK to every request, whatever the rules decide; the
	// counts and metrics are as without it.
	shadow bool
	// headers, if set, names the response headers to add.
	headers *Headers
	// ietf adds the IETF's RateLimit-Policy and RateLimit fields.
	ietf bool
	// uncountedOverLimit: a hit over its limit is not counted (this
	// service's behaviour before usage reports; envoyproxy/ratelimit counts
	// it).
	uncountedOverLimit bool
	// fixedWindows decides every rule as a fixed window (see
	// WithFixedWindows).
	fixedWindows bool
	// dynamicMetadata answers Envoy's dynamic metadata (see metadata.go).
	dynamicMetadata bool
	// loaded, if set, reports whether the rules have arrived: until they
	// have, a request is answered rlsconfig.ErrNoConfig.
	loaded func() bool
	// noRetryAfter leaves Retry-After off a refusal (see WithRetryAfter).
	noRetryAfter bool
	now          func() time.Time
}

// Headers are the names of the headers Envoy adds to its response: the
// limit, remaining and reset of the descriptor closest to its limit.
type Headers struct{ Limit, Remaining, Reset string }

// DefaultHeaders are envoyproxy/ratelimit's names.
var DefaultHeaders = Headers{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}

// Option configures a Service.
type Option func(*Service)

// WithShadowMode answers OK to every request, whatever the rules decide,
// while counting as usual (envoyproxy/ratelimit's global shadow mode).
func WithShadowMode(on bool) Option { return func(s *Service) { s.shadow = on } }

// WithResponseHeaders adds the headers named h to every answer whose
// descriptors had a limit.
func WithResponseHeaders(h Headers) Option { return func(s *Service) { s.headers = &h } }

// WithIETFHeaders adds to every answer whose descriptors had a limit the
// fields the IETF is standardising (draft-ietf-httpapi-ratelimit-headers):
// RateLimit-Policy, each limited descriptor's quota and window, and
// RateLimit, what remains of it and when it resets, each item named after
// the rule (its limit's name, else its name, else its path). Beside the
// headers of WithResponseHeaders, or instead of them.
func WithIETFHeaders(on bool) Option { return func(s *Service) { s.ietf = on } }

// WithRetryAfter sets whether a refused request's answer (OVER_LIMIT)
// carries Retry-After (RFC 9110), which Envoy adds to its 429: the
// seconds, rounded up, until the request would pass if no other traffic
// arrived, as the models that refused it compute the wait (on by
// default): the longest wait of the descriptors over their limits that
// are not quotas and, when every quota is spent, at least the shortest of
// theirs. An answer no wait helps (a cost above a limit, a rule of 0, a
// workspace at its window cap) carries none.
func WithRetryAfter(on bool) Option { return func(s *Service) { s.noRetryAfter = !on } }

// WithOverLimitHitsCounted sets whether a hit over its limit is counted,
// as envoyproxy/ratelimit counts it (true, the default): an AI gateway's
// report of the tokens a response used, sent on the response path, then
// spends the budget even when it crosses it, and the next request's check
// is refused. With false a denied hit counts nothing, as a Limit call's.
func WithOverLimitHitsCounted(on bool) Option { return func(s *Service) { s.uncountedOverLimit = !on } }

// WithFixedWindows, on, decides every limit as a fixed window of its
// length, whatever algorithm its rule names (a calendar's periods stay
// its windows): a counter per window, as envoyproxy/ratelimit counts, for
// the same answers as that service during a migration.
func WithFixedWindows(on bool) Option { return func(s *Service) { s.fixedWindows = on } }

// WithDynamicMetadata answers every request with Envoy's dynamic metadata,
// as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA: the domain, the
// descriptors, the hits addend, and the merged metadata of the rules that
// were not over their limits (see dynamicMetadata).
func WithDynamicMetadata(on bool) Option { return func(s *Service) { s.dynamicMetadata = on } }

// WithRulesLoaded makes every request wait for rules: until loaded reports
// true (the first configuration from xDS arrived), it is answered
// unavailable (rlsconfig.ErrNoConfig), where without the option it is
// decided by the rules in force, none at first: OK.
func WithRulesLoaded(loaded func() bool) Option { return func(s *Service) { s.loaded = loaded } }

// WithNearLimitRatio sets the share of a limit past which a hit counts as
// near it (0.8).
func WithNearLimitRatio(r float64) Option { return func(s *Service) { s.metrics.nearRatio = r } }

// WithClock sets the clock of duration_until_reset (time.Now).
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// New returns the service deciding on p by the rules config returns (read
// on every request, so a reload takes effect at once), with its metrics
// registered with reg; its routes are served behind l.
func New(l *transport.Layer, p *pipeline.Pipeline, config func() *rlsconfig.Config, reg prometheus.Registerer, opts ...Option) (*Service, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register rls metrics: %w", err)
	}
	s := &Service{layer: l, pipeline: p, config: config, metrics: m, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// ErrBounds refuses a request with too many descriptors or entries. A
// transport that counts them before decoding answers with it too.
var ErrBounds = &invalid.Error{Field: "descriptors",
	Rule: fmt.Sprintf("must hold 1 to %d descriptors of 1 to %d entries each", MaxDescriptors, MaxEntries)}

// ShouldRateLimit answers Envoy's request: each descriptor decided and
// counted on its own, in request order. failure.Classify sorts its errors;
// the transport maps them to its codes.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	if s.loaded != nil && !s.loaded() {
		return nil, rlsconfig.ErrNoConfig
	}
	// One authorization for the request: every descriptor is decided in
	// the domain's namespace.
	ns, err := s.pipeline.Namespace(ctx, rlsconfig.NamespacePrefix+req.Domain)
	if err != nil {
		return nil, err
	}
	cfg := s.config()
	cache := s.metrics.cacheFor(cfg)
	n := len(req.Descriptors)
	plans := make([]plan, n)
	replaced := map[string]bool{}
	for i, d := range req.Descriptors {
		p, err := s.plan(cfg, req, d)
		if err != nil {
			return nil, invalid.InEntry("descriptors", i, err)
		}
		p.cache = cache
		plans[i] = p
		if p.rule != nil {
			for _, name := range p.rule.Replaces {
				replaced[name] = true
			}
		}
	}
	uniqueReleases(plans)
	now := s.now()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	closest := -1
	// The request is over its limits when any descriptor that is not a
	// quota is over, or when it has quotas and every one is over.
	var overOther, overQuota, quotas int
	var passed []int // descriptors not over their limits, for the metadata
	for i := range plans {
		p := &plans[i]
		if p.rule != nil && p.rule.Name != "" && replaced[p.rule.Name] {
			p.counted = false
		}
		st, err := s.decide(ctx, ns, req.Domain, p, now)
		if err != nil {
			// Failed: the request holds no slot (it would never be
			// released: the answer carries no lease).
			s.giveBack(ctx, ns, req.Domain, plans)
			return nil, err
		}
		resp.Statuses[i] = st
		if p.unlimited {
			continue
		}
		quota := p.isQuota()
		if quota {
			quotas++
		}
		over := st.Code == rlsv3.RateLimitResponse_OVER_LIMIT
		switch {
		case over && quota:
			overQuota++
			continue // a spent quota does not set the headers: another may serve
		case over:
			overOther++
		default:
			passed = append(passed, i)
		}
		if st.CurrentLimit != nil && (closest < 0 || closer(st, resp.Statuses[closest])) {
			closest = i
		}
	}
	if overOther > 0 || (quotas > 0 && overQuota == quotas) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && !s.shadow {
		// Refused: the request holds no slot.
		s.giveBack(ctx, ns, req.Domain, plans)
	}
	if s.dynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, plans, passed)
	}
	if ids := leases(plans); ids != "" {
		resp.DynamicMetadata = withLeases(resp.DynamicMetadata, ids)
	}
	// The call's outcome is the overall answer, not its descriptors'.
	outcome := call.OutcomePassed
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && !s.shadow {
		outcome = call.OutcomeDenied
	}
	call.SetOutcome(ctx, outcome)
	if s.shadow && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		s.metrics.globalShadow.Inc()
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && !s.noRetryAfter {
		if wait := refusedFor(plans, resp.Statuses); wait > 0 {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
				&corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(ratelimitheader.CeilSeconds(wait), 10)})
		}
	}
	if s.ietf {
		// Every limited descriptor, quotas spent included.
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, ietfHeaders(plans, resp.Statuses)...)
	}
	if s.headers != nil && closest >= 0 {
		st := resp.Statuses[closest]
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, []*corev3.HeaderValue{
			{Key: s.headers.Limit, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
			{Key: s.headers.Remaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
			{Key: s.headers.Reset, Value: strconv.FormatInt(ratelimitheader.CeilSeconds(st.DurationUntilReset.AsDuration()), 10)},
		}...)
	}
	return resp, nil
}

// isQuota reports whether p is a counted descriptor of a quota_mode rule:
// over its limit, it refuses the request only when every quota is.
func (p *plan) isQuota() bool { return p.counted && p.rule != nil && p.rule.QuotaMode }

// refusedFor returns how long a refused request stays refused if no
// other traffic arrives: until every descriptor over its limit that is not
// a quota admits it (the longest of their waits), and, when every quota is
// spent, until one of them does (the shortest); 0 when some descriptor
// over its limit is one no wait helps.
func refusedFor(plans []plan, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) time.Duration {
	var others, quotaWait time.Duration
	quotaOver, quotaOK := false, false
	for i := range plans {
		p := &plans[i]
		quota := p.isQuota()
		over := statuses[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT
		switch {
		case quota && !over:
			quotaOK = true
		case quota:
			quotaOver = true
			if p.retryAfter > 0 && (quotaWait == 0 || p.retryAfter < quotaWait) {
				quotaWait = p.retryAfter
			}
		case !over:
		case p.retryAfter <= 0:
			return 0
		default:
			others = max(others, p.retryAfter)
		}
	}
	if quotaOver && !quotaOK {
		// Every quota is spent: the request waits for the first to free.
		if quotaWait == 0 {
			return 0
		}
		others = max(others, quotaWait)
	}
	return others
}

// closer reports whether a is closer to its limit than b: over it, or
// with less remaining.
func closer(a, b *rlsv3.RateLimitResponse_DescriptorStatus) bool {
	aOver, bOver := a.Code == rlsv3.RateLimitResponse_OVER_LIMIT, b.Code == rlsv3.RateLimitResponse_OVER_LIMIT
	if aOver != bOver {
		return aOver
	}
	return a.LimitRemaining < b.LimitRemaining
}

// validate checks what the pipeline does not: the request's shape.
func validate(req *rlsv3.RateLimitRequest) error {
	// The bound first: a request over it may have been left undecoded
	// (see refuseOversized).
	if len(req.Descriptors) == 0 || len(req.Descriptors) > MaxDescriptors {
		return ErrBounds
	}
	if req.Domain == "" {
		return &invalid.Error{Field: "domain", Rule: "must not be empty"}
	}
	ids := 0
	for i, d := range req.Descriptors {
		if len(d.GetEntries()) == 0 || len(d.GetEntries()) > MaxEntries {
			return &invalid.Error{Field: fmt.Sprintf("descriptors[%d].entries", i),
				Rule: fmt.Sprintf("must hold 1 to %d entries", MaxEntries)}
		}
		for j, e := range d.Entries {
			if e.GetKey() == "" {
				return &invalid.Error{Field: fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), Rule: "must not be empty"}
			}
			maxValue := MaxEntryBytes
			if e.GetKey() == ReleaseKey {
				maxValue = MaxReleaseBytes
				if ids += strings.Count(e.GetValue(), ",") + 1; ids > MaxReleaseIDs {
					return &invalid.Error{Field: fmt.Sprintf("descriptors[%d]", i),
						Rule: fmt.Sprintf("must carry at most %d lease ids in the request's release entries altogether (one a descriptor the request-path call acquired)", MaxReleaseIDs)}
				}
			}
			if len(e.GetKey()) > MaxEntryBytes || len(e.GetValue()) > maxValue {
				return &invalid.Error{Field: fmt.Sprintf("descriptors[%d].entries[%d]", i, j),
					Rule: fmt.Sprintf("key and value must be at most %d bytes each (a release's value %d)", MaxEntryBytes, MaxReleaseBytes)}
			}
		}
	}
	return nil
}

// plan is what a descriptor is decided by.
type plan struct {
	rule      *rlsconfig.Rule // nil for a descriptor-level limit
	counted   bool            // false: answered OK without a counter
	unlimited bool
	shadow    bool
	// limits are the descriptor's limits, each its own window: one for a
	// descriptor-level limit, the rule's otherwise.
	limits     []rlsconfig.Limit
	identifier string
	// metric and keys label the descriptor's statistics: this service's
	// rule label, and envoyproxy/ratelimit's key1 and key2 (see
	// metrics.label).
	metric string
	keys   [2]string
	// cache holds the counters of the configuration the request read;
	// silent is set when its rule has left the configuration since: its
	// hits are then counted in no series (see metrics.unseen).
	cache  *counterCache
	silent bool
	cost   int64
	// policy, quota and window are the limit that decided, once decided:
	// its name in the IETF's fields, and its quota in its window (a token
	// bucket's burst in its refill: see ratelimit.Request.Policy).
	policy string
	quota  int64
	window time.Duration
	// retryAfter is, for a descriptor over its limit, how long until it
	// admits the request if no other traffic arrives (0: no wait helps).
	retryAfter time.Duration
	// releasing marks a release descriptor (see ReleaseKey), and release
	// holds its entry's lease ids; releaseIDs are those of them no earlier
	// descriptor of the request named (see uniqueReleases), the ones it
	// frees. lease holds the slots a concurrency limit took, and what it
	// saw in flight.
	releasing  bool
	release    string
	releaseIDs []string
	lease      pipeline.Lease
	// negative marks Envoy's negative hits (is_negative_hits): cost is
	// given back to the descriptor's limits, not counted (see refund).
	negative bool
	// fromRequest marks a limit the request carries (a descriptor-level
	// limit): bounded as Limit's are, a window of at most 30 days and a
	// limit of at least 1, where the operator's rules may use a year's
	// window and a limit of 0 that blocks.
	fromRequest bool
}

// plan finds what decides descriptor d: its own limit if Envoy sent one
// (for a domain of the configuration, as envoyproxy/ratelimit does), else
// the rule it matches.
func (s *Service) plan(cfg *rlsconfig.Config, req *rlsv3.RateLimitRequest, d *rlcommonv3.RateLimitDescriptor) (plan, error) {
	cost := int64(1)
	if req.HitsAddend > 0 {
		cost = int64(req.HitsAddend)
	}
	if h := d.GetHitsAddend(); h != nil {
		if err := ratelimit.CheckCost("hits_addend", int64(min(h.Value, ratelimit.MaxCost+1))); err != nil {
			return plan{}, err
		}
		cost = int64(h.Value) // an explicit 0 checks without counting
	}
	entries := make([]rlsconfig.Entry, 0, len(d.Entries))
	var release string
	releasing := false
	for _, e := range d.Entries {
		if e.Key == ReleaseKey {
			// A release: the other entries name the rule.
			release, releasing = e.Value, true
			continue
		}
		entries = append(entries, rlsconfig.Entry{Key: e.Key, Value: e.Value})
	}
	if releasing {
		p := plan{release: release, releasing: true, counted: true}
		if m, ok := cfg.Match(req.Domain, entries); ok && len(entries) > 0 {
			p.rule = m.Rule
		}
		return p, nil
	}
	if l := d.GetLimit(); l != nil && cfg.HasDomain(req.Domain) {
		unit := rlsconfig.Unit(l.Unit)
		if unit.Duration() == 0 || unit.Duration() > ratelimit.MaxDuration {
			return plan{}, &invalid.Error{Field: "limit.unit",
				Rule: "must be SECOND, MINUTE, HOUR, DAY, WEEK or MONTH (a request's own limit spans at most 30 days, as Limit's)"}
		}
		if l.RequestsPerUnit == 0 {
			return plan{}, &invalid.Error{Field: "limit.requests_per_unit", Rule: "must be at least 1"}
		}
		id := rlsconfig.Identifier(entries)
		if err := checkIdentifier(id); err != nil {
			return plan{}, err
		}
		// One fixed label for every request-supplied limit: a client
		// chooses its keys as freely as its values.
		return plan{counted: true, limits: []rlsconfig.Limit{{RequestsPerUnit: l.RequestsPerUnit, Unit: unit, UnitMultiplier: 1}},
			identifier: id, metric: descriptorLimitMetric, keys: [2]string{descriptorLimitMetric}, cost: cost, fromRequest: true,
			negative: d.GetIsNegativeHits()}, nil
	}
	m, ok := cfg.Match(req.Domain, entries)
	if !ok {
		return plan{}, nil
	}
	if err := checkIdentifier(m.Identifier); err != nil {
		return plan{}, err
	}
	r := m.Rule
	return plan{rule: r, counted: !r.Unlimited, unlimited: r.Unlimited, shadow: r.ShadowMode, limits: r.Limits,
		identifier: m.Identifier, metric: m.Metric, keys: m.MetricKeys, cost: cost, negative: d.GetIsNegativeHits()}, nil
}

// checkIdentifier refuses a descriptor whose counter name is longer than
// MaxIdentifier characters: checked with the others before any descriptor
// is counted, so that nothing is counted for a request that fails.
func checkIdentifier(id string) error {
	if utf8.RuneCountInString(id) > MaxIdentifier {
		return &invalid.Error{Field: "entries",
			Rule: fmt.Sprintf("must name a counter of at most %d characters, written key=value,… with special characters escaped", MaxIdentifier)}
	}
	return nil
}

// decide decides one planned descriptor.
func (s *Service) decide(ctx context.Context, ns pipeline.Namespace, domain string, p *plan, now time.Time) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	if p.unlimited {
		// Labelled within the bounds, as every counted hit is.
		s.metrics.label(domain, p, call.Workspace(ctx))
		s.metrics.hits(domain, p)
		s.metrics.within(domain, p)
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}, nil
	}
	if !p.counted {
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, nil
	}
	if p.releasing {
		return s.release(ctx, ns, domain, p), nil
	}
	if p.negative {
		return s.refund(ctx, ns, p, now)
	}
	var d limitDecision
	var capacity *ratelimit.CapacityError
	var err error
	if p.isConcurrency() {
		d, capacity, err = s.acquire(ctx, ns, p)
		if err == nil && p.rule != nil {
			s.metrics.inFlight.WithLabelValues(domain, truncateLabel(p.rule.Path)).Set(float64(p.lease.InFlight))
		}
	} else {
		d, capacity, err = s.limit(ctx, ns, p)
	}
	if err != nil {
		return nil, err
	}
	p.quota, p.window, p.policy = d.Quota, d.QuotaWindow, descriptorLimitMetric
	record(ctx, &d, p)
	if d.OverrideID != "" {
		d.name = "" // the override decided, not the limit of that name
	}
	if p.rule != nil {
		p.policy = cmp.Or(d.name, p.rule.Name, p.rule.Path)
	}
	s.metrics.label(domain, p, call.Workspace(ctx))
	s.metrics.hits(domain, p)
	st := d.status(now)
	switch {
	case capacity != nil:
		// The workspace holds the most windows allowed, and this key is
		// not one of them: fail closed, this descriptor alone, as a
		// BatchLimit entry is denied, so that a caller who filled the cap
		// with fresh values is not let through (Envoy admits a request
		// whose call fails, with failure_mode_deny off).
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		st.LimitRemaining = 0
		s.metrics.over(domain, p)
	case !d.Success && p.shadow, d.ShadowDenied: // a rule's shadow_mode, or a shadow override's
		s.metrics.over(domain, p)
		s.metrics.shadowHits(domain, p)
	case !d.Success:
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		p.retryAfter = d.RetryAfter
		s.metrics.over(domain, p)
	default:
		s.metrics.within(domain, p)
		if s.metrics.isNear(d.Limit, d.Remaining) {
			s.metrics.near(domain, p)
		}
	}
	return st, nil
}

// limitDecision is the decision of one of a descriptor's limits.
type limitDecision struct {
	pipeline.Decision
	name string
	unit rlsconfig.Unit
}

// status returns d as the OK status of its descriptor at now: its limit,
// what remains of it and when it resets.
func (d *limitDecision) status(now time.Time) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code: rlsv3.RateLimitResponse_OK,
		CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: d.name, RequestsPerUnit: uint32(min(d.Limit, math.MaxUint32)),
			Unit: rlsv3.RateLimitResponse_RateLimit_Unit(d.unit)},
		LimitRemaining:     uint32(min(max(d.Remaining, 0), math.MaxUint32)),
		DurationUntilReset: durationpb.New(max(d.Reset.Sub(now), 0)),
	}
}

// limit decides p's limits, each in its own window, and returns the
// tightest decision: the first denied, else the one with the least
// remaining. capacity is set when the workspace could not hold a window
// (the decision is then over its limit). With several limits, a hit is
// counted in every window where hits over the limit are counted (as
// envoyproxy/ratelimit counts each descriptor), and all or nothing
// otherwise.
func (s *Service) limit(ctx context.Context, ns pipeline.Namespace, p *plan) (limitDecision, *ratelimit.CapacityError, error) {
	var one [1]pipeline.Call // most descriptors have one limit: no allocation
	calls := s.calls(ctx, ns, p, one[:0])
	var capacity *ratelimit.CapacityError
	if len(calls) > 1 && s.uncountedOverLimit {
		m, err := ns.Multi(ctx, calls)
		if err != nil && !errors.As(err, &capacity) {
			return limitDecision{}, nil, err
		}
		if len(m.Results) == 0 {
			// The workspace could not hold the windows: over, counted
			// nowhere.
			l := p.limits[0]
			return limitDecision{Decision: pipeline.Decision{Response: ratelimit.Response{Limit: int64(l.RequestsPerUnit)},
				Duration: calls[0].Request.Window(s.now())}, name: l.Name, unit: unitOf(l, l.Duration())}, capacity, nil
		}
		best := -1
		for i, d := range m.Results {
			if best < 0 || tighter(d, m.Results[best]) {
				best = i
			}
		}
		d := m.Results[best]
		if !m.Passed {
			d.Success = false
		}
		return limitDecision{Decision: d, name: p.limits[best].Name, unit: unitOf(p.limits[best], d.Duration)}, capacity, nil
	}
	var out limitDecision
	for i := range calls {
		d, err := ns.Limit(ctx, calls[i])
		var c *ratelimit.CapacityError
		if err != nil && !errors.As(err, &c) {
			return limitDecision{}, nil, err
		}
		if c != nil {
			capacity = c
		}
		if i == 0 || tighter(d, out.Decision) {
			out = limitDecision{Decision: d, name: p.limits[i].Name, unit: unitOf(p.limits[i], d.Duration)}
		}
	}
	return out, capacity, nil
}

// calls appends to buf, and returns, the calls of p's limits, each its own
// window, as a hit is counted and negative hits are given back: the
// counter's name is the adapter's, built from the descriptor (a long one
// is counted under its digest); an operator's rule may have a year's
// window and a limit of 0 that blocks, a request's own limit not (see
// plan.fromRequest); with WithFixedWindows every limit is a fixed window
// of its length; an override that applies replaces the limits with its
// one (one window, counted once).
func (s *Service) calls(ctx context.Context, ns pipeline.Namespace, p *plan, buf []pipeline.Call) []pipeline.Call {
	calls := buf
	for _, l := range p.limits {
		c := pipeline.Call{
			Request: ratelimit.Request{Namespace: ns.Name(), Identifier: p.identifier,
				Limit: int64(l.RequestsPerUnit), Duration: l.Duration(), Cost: p.cost, Report: !s.uncountedOverLimit,
				Algorithm: l.Algorithm, Burst: l.Burst, Calendar: l.Calendar},
			Bounds: operatorBounds}
		if s.fixedWindows {
			// envoyproxy/ratelimit's counts, exactly: a counter per
			// window of the rule's length.
			c.Request.Algorithm, c.Request.Burst = ratelimit.FixedWindow, 0
		}
		if p.fromRequest {
			c.Bounds = callerBounds
		}
		if p.rule != nil && !p.shadow && l.Algorithm != ratelimit.Concurrency {
			// A shadow_mode rule answers OK: its denials block nothing.
			c.Penalty, c.PenaltyMax = p.rule.Penalty, p.rule.PenaltyMax
		}
		calls = append(calls, c)
	}
	if len(calls) > 1 && ns.Overridden(ctx, p.identifier) {
		calls = calls[:1]
	}
	return calls
}

// tighter reports whether a is closer to its limit than b: denied, or
// with less remaining.
func tighter(a, b pipeline.Decision) bool {
	if a.Success != b.Success {
		return !a.Success
	}
	return a.Remaining < b.Remaining
}

// unitOf is the unit Envoy's current_limit names for l, decided in a
// window of length applied: l's unit, when the window is one of it; else
// the unit the window spans exactly (60 seconds: MINUTE; an override's
// window), else UNKNOWN, as Envoy's field has no multiplier.
func unitOf(l rlsconfig.Limit, applied time.Duration) rlsconfig.Unit {
	if applied == l.Unit.Duration() || !l.Calendar.IsZero() {
		return l.Unit
	}
	return rlsconfig.UnitOf(applied)
}

// ietfHeaders returns the IETF's two fields for the limited descriptors
// of a request: one item each, in request order.
func ietfHeaders(plans []plan, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	var policies, limits []string
	for i := range plans {
		p, st := &plans[i], statuses[i]
		if !p.counted || p.unlimited || st.CurrentLimit == nil {
			continue
		}
		policies = append(policies, ratelimitheader.Policy(p.policy, p.quota, p.window))
		limits = append(limits, ratelimitheader.Limit(p.policy, int64(st.LimitRemaining), st.DurationUntilReset.AsDuration()))
	}
	if len(policies) == 0 {
		return nil
	}
	return []*corev3.HeaderValue{
		{Key: ratelimitheader.PolicyField, Value: strings.Join(policies, ", ")},
		{Key: ratelimitheader.LimitField, Value: strings.Join(limits, ", ")},
	}
}

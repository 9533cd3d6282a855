// Package rlsconfig reads the rate limit configuration of Envoy's rate limit
// service in envoyproxy/ratelimit's formats — its YAML files (Source), or
// the RateLimitConfig resources an xDS management server pushes
// (XDSSource) — and finds the rule that applies to a request's
// descriptor. It knows nothing of the wire protocol
// or of the counters: an adapter maps a match to a limiter request.
//
// Glossary, in the format's own words:
//   - domain: a set of rules, named by the request.
//   - descriptor: a list of entries (key and value) sent by Envoy; the
//     configuration's descriptors form a tree, one level per entry.
//   - rule: a descriptor of the configuration with a rate_limit block (or,
//     in a file, a rate_limits list).
package rlsconfig

import (
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
)

// Config is a set of domains compiled from configuration files or xDS
// resources. It does not change once built; a reload builds a new one.
type Config struct {
	domains map[string]*node
	rules   int
	// models counts the limits of every rule by model (see Models).
	models map[string]int
	// paths holds every rule's path.
	paths map[string]struct{}
	// seq orders the configurations of a process: a later one compiled
	// later (see Newer).
	seq uint64
}

// compiled numbers the configurations a process compiles, in order.
var compiled atomic.Uint64

// Newer reports whether c was compiled after other.
func (c *Config) Newer(other *Config) bool { return c.seq > other.seq }

// again returns c as if compiled now: the same rules (a compiled
// configuration is never changed), later in the order of Newer than every
// configuration compiled so far. A configuration put back in force (a
// version flapping back) is so the newest.
func (c *Config) again() *Config {
	cp := *c
	cp.seq = compiled.Add(1)
	return &cp
}

// HasRule reports whether a rule of the configuration has path (see
// Rule.Path).
func (c *Config) HasRule(path string) bool {
	_, ok := c.paths[path]
	return ok
}

// Rule is the limits of one descriptor of the configuration: its
// rate_limit block and, in a file, its rate_limits list.
type Rule struct {
	// Path names the rule as envoyproxy/ratelimit's statistics do: the
	// domain, then each level's key (with its value if the file gives one),
	// joined by dots, such as "messaging.message_type_marketing.to_number".
	// It is a bounded label: one per rule of the configuration.
	Path string
	// Keys are the names of the rule's first two levels (key, or
	// key_value where the file gives a value; "" where there is no
	// second), as envoyproxy/ratelimit's Prometheus names label its
	// statistics: key1 and key2.
	Keys [2]string
	// Limits are the rule's limits: its rate_limit block's, then those of
	// its rate_limits list, each counted in its own window. A hit is over
	// the rule when it is over any of them. Empty for an unlimited rule.
	Limits []Limit
	// Unlimited rules are never counted: their answer is always OK.
	Unlimited bool
	// Name and Replaces: a matched rule whose Name another matched rule of
	// the same request replaces is dropped from that request. Name is the
	// rate_limit block's.
	Name     string
	Replaces []string
	// ShadowMode rules are counted and reported, but their answer is
	// always OK.
	ShadowMode bool
	// DetailedMetric rules report under the request's values instead of
	// Path.
	DetailedMetric bool
	// QuotaMode rules are quotas, as envoyproxy/ratelimit's quota_mode: a
	// request is over its limits when any other rule of it is over, or
	// when every quota rule of it is over; one quota over of several is
	// not enough (the others are backends with quota left).
	QuotaMode bool
	// Penalty, if not zero, blocks the descriptor's counter name in its
	// domain for that long once the rule denies a hit of it; a repeat
	// offence doubles the block up to PenaltyMax (30 days if 0). Only
	// from files: xDS's descriptors have no such field.
	Penalty, PenaltyMax time.Duration
	// Metadata is the rule's metadata from its file (nil for none):
	// answered in Envoy's dynamic metadata for a request where the rule
	// was not over its limit, so that a route can pick what it names.
	// Shared by every request: never modify it.
	Metadata *structpb.Struct
}

// node is one descriptor of the tree: a level of matching.
type node struct {
	key, value string
	// wildcard holds value split on '*' when value has one.
	wildcard       []string
	shareThreshold bool
	valueToMetric  bool
	rule           *Rule
	exact          map[entry]*node // children with a value without '*', and with no value
	wildcards      []*node         // children with a '*' in the value, in file order
}

type entry struct {
	key, value string
	hasValue   bool
}

// maxDomainBytes bounds a domain name: the counters of a domain live in the
// namespace "envoy:" + domain, and a namespace holds at most 255
// characters.
const maxDomainBytes = 255 - len(NamespacePrefix)

// NamespacePrefix begins the namespace of every domain's counters, which
// keeps them apart from the namespaces callers of the limiter's own API
// choose unless they choose this one on purpose.
const NamespacePrefix = "envoy:"

// Load compiles files into a configuration. Every error names the file and,
// where it can, the descriptor; nothing of a broken set of files is used.
// Two files may not define the same domain.
func Load(files ...File) (*Config, error) { return Compiler{}.Load(files...) }

// Load is [Load] by c: files past its bounds are refused naming the
// bound.
func (c Compiler) Load(files ...File) (*Config, error) {
	sources := make([]source, len(files))
	for i, f := range files {
		roots, err := parseFile(f)
		if err != nil {
			return nil, err
		}
		sources[i] = source{name: f.Name, roots: roots}
	}
	if err := c.Bounds.checkFiles(sources); err != nil {
		return nil, err
	}
	return c.compileSources(sources)
}

// source is the domains of one file or one xDS resource, named for errors.
type source struct {
	name  string
	roots []fileRoot
}

// compileSources compiles the domains of sources into one configuration;
// a domain may be defined once.
func (cc Compiler) compileSources(sources []source) (*Config, error) {
	c := &Config{domains: map[string]*node{}, paths: map[string]struct{}{}, models: map[string]int{}, seq: compiled.Add(1)}
	origin := map[string]string{}
	for _, src := range sources {
		for _, root := range src.roots {
			if err := checkDomain(root.Domain); err != nil {
				return nil, fmt.Errorf("%s: %w", src.name, err)
			}
			if prev, ok := origin[root.Domain]; ok {
				return nil, fmt.Errorf("%s: domain %q is already defined in %s", src.name, root.Domain, prev)
			}
			origin[root.Domain] = src.name
			d := &node{exact: map[entry]*node{}}
			if err := c.compile(d, root.Domain, nil, root.Descriptors, cc.CalendarZone); err != nil {
				return nil, fmt.Errorf("%s: %w", src.name, err)
			}
			c.domains[root.Domain] = d
		}
	}
	return c, nil
}

func checkDomain(domain string) error {
	switch {
	case domain == "":
		return fmt.Errorf("domain: must not be empty")
	case len(domain) > maxDomainBytes || !utf8.ValidString(domain) || strings.ContainsFunc(domain, ratelimit.IsControl):
		return fmt.Errorf("domain: must be 1 to %d bytes of valid UTF-8 without control characters", maxDomainBytes)
	}
	return nil
}

// compile adds descriptors as children of parent, whose path is path and
// whose levels are named levels.
func (c *Config) compile(parent *node, path string, levels []string, descriptors []fileDescriptor, calendarZone *string) error {
	for _, d := range descriptors {
		if d.Key == "" {
			return fmt.Errorf("%s: a descriptor has an empty key", path)
		}
		n := &node{key: d.Key, value: d.Value, shareThreshold: d.ShareThreshold, valueToMetric: d.ValueToMetric,
			exact: map[entry]*node{}}
		name := descriptorName(d.Key, d.Value)
		here := path + "." + name
		if strings.Contains(d.Value, "*") {
			n.wildcard = strings.Split(d.Value, "*")
			for _, w := range parent.wildcards {
				if w.key == d.Key && w.value == d.Value {
					return fmt.Errorf("%s: duplicate descriptor", here)
				}
			}
			parent.wildcards = append(parent.wildcards, n)
		} else {
			e := entry{key: d.Key, value: d.Value, hasValue: d.Value != ""}
			if _, dup := parent.exact[e]; dup {
				return fmt.Errorf("%s: duplicate descriptor", here)
			}
			parent.exact[e] = n
		}
		if d.ShareThreshold && n.wildcard == nil {
			return fmt.Errorf("%s: share_threshold can only be used with a wildcard value (one with a '*')", here)
		}
		if d.RateLimit != nil || len(d.RateLimits) > 0 {
			r, err := compileRule(here, d, calendarZone)
			if err != nil {
				return err
			}
			r.Keys = metricKeys(append(levels, name))
			c.paths[here] = struct{}{}
			n.rule = r
			c.rules++
			for _, l := range r.Limits {
				c.models[l.Model()]++
			}
		}
		if err := c.compile(n, here, append(levels[:len(levels):len(levels)], name), d.Descriptors, calendarZone); err != nil {
			return err
		}
	}
	return nil
}

// MaxPenalty is the longest penalty or penalty_max a rule may give, as
// any caller: the longest duration a limit takes.
const MaxPenalty = ratelimit.MaxDuration

// compilePenalty reads d's penalty and penalty_max into r: durations of
// 1 ms to MaxPenalty, penalty_max at least penalty, and only on a
// descriptor with a rate_limit or rate_limits of its own.
func compilePenalty(path string, d fileDescriptor, r *Rule) error {
	if d.Penalty == "" && d.PenaltyMax == "" {
		return nil
	}
	for _, f := range []struct {
		name, v string
		to      *time.Duration
	}{{"penalty", d.Penalty, &r.Penalty}, {"penalty_max", d.PenaltyMax, &r.PenaltyMax}} {
		if f.v == "" {
			continue
		}
		v, err := time.ParseDuration(f.v)
		if err != nil || v < time.Millisecond || v > MaxPenalty {
			return fmt.Errorf("%s: %s: must be a duration from 1ms to 720h, such as 5m; got %q", path, f.name, f.v)
		}
		*f.to = v
	}
	switch {
	case r.Penalty == 0:
		return fmt.Errorf("%s: penalty_max: must not be given without penalty", path)
	case r.PenaltyMax != 0 && r.PenaltyMax < r.Penalty:
		return fmt.Errorf("%s: penalty_max: must be at least penalty (%s), got %s", path, r.Penalty, r.PenaltyMax)
	case (d.RateLimit == nil || d.RateLimit.Unlimited) && len(d.RateLimits) == 0:
		return fmt.Errorf("%s: penalty: must be given with a rate_limit or rate_limits of the descriptor's own", path)
	}
	return nil
}

func compileRule(path string, d fileDescriptor, calendarZone *string) (*Rule, error) {
	r := &Rule{Path: path, ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric, QuotaMode: d.QuotaMode}
	if err := compilePenalty(path, d, r); err != nil {
		return nil, err
	}
	if d.Metadata != nil {
		md, err := structpb.NewStruct(d.Metadata)
		if err != nil {
			return nil, fmt.Errorf("%s: metadata: must be a map of string keys to YAML values: %w", path, err)
		}
		r.Metadata = md
	}
	if rl := d.RateLimit; rl != nil {
		r.Unlimited, r.Name = rl.Unlimited, rl.Name
		switch {
		case rl.Unlimited && rl.Unit != "":
			return nil, fmt.Errorf("%s: rate_limit.unit: must not be given when unlimited is true", path)
		case rl.Unlimited && rl.RequestsPerUnit != nil:
			return nil, fmt.Errorf("%s: rate_limit.requests_per_unit: must not be given when unlimited is true", path)
		case rl.Unlimited && rl.UnitMultiplier != nil:
			return nil, fmt.Errorf("%s: rate_limit.unit_multiplier: must not be given when unlimited is true", path)
		case rl.Unlimited && (rl.Algorithm != "" || rl.Burst != nil || rl.Calendar != nil):
			return nil, fmt.Errorf("%s: rate_limit: algorithm, burst and calendar must not be given when unlimited is true", path)
		case rl.Unlimited && len(d.RateLimits) > 0:
			return nil, fmt.Errorf("%s: rate_limits: must not be given when rate_limit.unlimited is true", path)
		}
		if !rl.Unlimited {
			l, err := compileLimit(path+": rate_limit", rl.fileLimit, calendarZone)
			if err != nil {
				return nil, err
			}
			l.Name = rl.Name
			r.Limits = append(r.Limits, l)
		}
		for _, rep := range rl.Replaces {
			switch rep.Name {
			case "":
				return nil, fmt.Errorf("%s: rate_limit.replaces: an entry has no name", path)
			case rl.Name:
				return nil, fmt.Errorf("%s: rate_limit.replaces: must not name the rule itself (%q)", path, rl.Name)
			}
			r.Replaces = append(r.Replaces, rep.Name)
		}
	}
	for i, fl := range d.RateLimits {
		l, err := compileLimit(fmt.Sprintf("%s: rate_limits[%d]", path, i), fl, calendarZone)
		if err != nil {
			return nil, err
		}
		r.Limits = append(r.Limits, l)
	}
	for _, l := range r.Limits {
		switch {
		case l.Algorithm != ratelimit.Concurrency:
		case len(r.Limits) > 1:
			// A release names the slots its acquisition took, one
			// limit's.
			return nil, fmt.Errorf("%s: rate_limits: a concurrency limit must be its descriptor's only limit", path)
		case r.Penalty > 0:
			// A slot refused is no offence: the caller waits for one.
			return nil, fmt.Errorf("%s: penalty: must not be given with a concurrency limit", path)
		}
	}
	if len(r.Limits) > MaxLimitsPerRule {
		return nil, fmt.Errorf("%s: rate_limits: a descriptor holds at most %d limits, has %d", path, MaxLimitsPerRule, len(r.Limits))
	}
	// Each limit is its own window, and a window is named by the
	// descriptor and its length: two limits of one length would count
	// in one window.
	for i, l := range r.Limits {
		for _, prev := range r.Limits[:i] {
			if prev.window() == l.window() {
				return nil, fmt.Errorf("%s: rate_limits: two limits span %s; each limit of a descriptor needs its own length of window",
					path, l.describe())
			}
		}
	}
	return r, nil
}

// compileLimit reads one limit (of rate_limit or of rate_limits), where
// names it in errors.
func compileLimit(where string, fl fileLimit, calendarZone *string) (Limit, error) {
	l := Limit{UnitMultiplier: 1, Name: fl.Name}
	if fl.RequestsPerUnit != nil {
		l.RequestsPerUnit = *fl.RequestsPerUnit
	}
	alg, ok := algorithms[strings.ToLower(fl.Algorithm)]
	if !ok {
		return Limit{}, fmt.Errorf("%s.algorithm: %q is not one of sliding_window, fixed_window, token_bucket, concurrency", where, fl.Algorithm)
	}
	if _, calendarUnit := calendarUnits[strings.ToLower(fl.Unit)]; calendarZone != nil && calendarUnit && fl.Calendar == nil &&
		alg != ratelimit.TokenBucket && alg != ratelimit.Concurrency {
		// Calendar units (see Compiler.CalendarZone): the unit names
		// the calendar's periods, in the compiler's zone.
		if fl.UnitMultiplier != nil && *fl.UnitMultiplier != 1 {
			return Limit{}, fmt.Errorf("%s.unit_multiplier: must be 1 (or not given) for unit %s with calendar units on (UNKEY_RLS_CALENDAR_UNITS): a window is one calendar %s",
				where, strings.ToLower(fl.Unit), strings.ToLower(fl.Unit))
		}
		fl.Calendar = &fileCalendar{Unit: fl.Unit, TimeZone: *calendarZone}
		fl.Unit, fl.UnitMultiplier = "", nil
	}
	l.Algorithm = alg
	if fl.Burst != nil {
		// 0 is requests_per_unit, as the API's burst of 0 is its limit:
		// one field, one set of bounds wherever a limit is written.
		if alg != ratelimit.TokenBucket {
			return Limit{}, fmt.Errorf("%s.burst: must be given only with algorithm token_bucket", where)
		}
		l.Burst = int64(*fl.Burst)
	}
	if c := fl.Calendar; c != nil {
		switch {
		case fl.Unit != "" || fl.UnitMultiplier != nil:
			return Limit{}, fmt.Errorf("%s.calendar: must be given without unit and unit_multiplier: its periods are the windows", where)
		case alg == ratelimit.TokenBucket || alg == ratelimit.Concurrency:
			return Limit{}, fmt.Errorf("%s.calendar: must not be given with algorithm %s: a calendar's periods are fixed windows", where, alg)
		}
		unit, ok := calendarUnits[strings.ToLower(c.Unit)]
		if !ok {
			return Limit{}, fmt.Errorf("%s.calendar.unit: %q is not one of day, week, month, year", where, c.Unit)
		}
		p, err := ratelimit.NewCalendar(unit.calendar, c.TimeZone)
		if err != nil {
			return Limit{}, fmt.Errorf("%s.%w", where, err)
		}
		l.Calendar, l.Unit, l.Algorithm = p, unit.envoy, ratelimit.FixedWindow
		return l, nil
	}
	unit, ok := parseUnit(fl.Unit)
	if !ok {
		return Limit{}, fmt.Errorf("%s.unit: %q is not one of second, minute, hour, day, week, month, year", where, fl.Unit)
	}
	l.Unit = unit
	if fl.UnitMultiplier != nil {
		l.UnitMultiplier = *fl.UnitMultiplier
		// A window spans at most the limiter's longest, a year's rule.
		if max := uint32(ratelimit.MaxWindow / unit.Duration()); l.UnitMultiplier < 1 || l.UnitMultiplier > max {
			return Limit{}, fmt.Errorf("%s.unit_multiplier: must be 1 to %d for unit %s (a window spans at most %d days)",
				where, max, strings.ToLower(unit.String()), ratelimit.MaxWindow/(24*time.Hour))
		}
	}
	if alg == ratelimit.Concurrency {
		// The window is the lease: how long a slot whose release never
		// comes stays held.
		if err := ratelimit.CheckLease("lease", l.Duration()); err != nil {
			return Limit{}, fmt.Errorf("%s.unit: a concurrency limit's unit (times unit_multiplier) is its lease, 1 s to 1 h; is %s", where, l.Duration())
		}
	}
	return l, nil
}

// algorithms are the models a limit may name, by their YAML spelling.
var algorithms = map[string]ratelimit.Algorithm{
	"": ratelimit.SlidingWindow, "sliding_window": ratelimit.SlidingWindow,
	"fixed_window": ratelimit.FixedWindow, "token_bucket": ratelimit.TokenBucket,
	"concurrency": ratelimit.Concurrency,
}

// calendarUnits are a calendar's units, by their YAML spelling, with the
// Envoy unit that names each in current_limit.
var calendarUnits = map[string]struct {
	calendar calendar.Unit
	envoy    Unit
}{
	"day": {calendar.Day, UnitDay}, "week": {calendar.Week, UnitWeek},
	"month": {calendar.Month, UnitMonth}, "year": {calendar.Year, UnitYear},
}

// MaxLimitsPerRule bounds the limits of one descriptor (rate_limit and
// rate_limits together): each is a window a hit is counted in.
const MaxLimitsPerRule = 16

// metricKeys returns the first two of levels.
func metricKeys(levels []string) [2]string {
	var k [2]string
	copy(k[:], levels)
	return k
}

// Domains returns the number of domains and of rules.
func (c *Config) Domains() (domains, rules int) { return len(c.domains), c.rules }

// Models returns how many limits of the rules each model decides, by
// Limit.Model's names.
func (c *Config) Models() map[string]int { return maps.Clone(c.models) }

// HasDomain reports whether the configuration defines domain.
func (c *Config) HasDomain(domain string) bool {
	_, ok := c.domains[domain]
	return ok
}

// descriptorName names a descriptor of key and value in a rule's path, as
// envoyproxy/ratelimit's statistics do: the key, and "_" and the value if
// it has one.
func descriptorName(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}

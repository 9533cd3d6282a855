// Package rlqsenvoy emulates one Envoy's rate_limit_quota HTTP filter (the
// client of Envoy's Rate Limit Quota Service, RLQS) as Envoy's source
// behaves, so that a test can measure a fleet of Envoys against a quota
// server without running Envoy: which requests it lets through, the usage
// reports it sends, and how it applies the assignments it is sent. What
// each rule follows is Envoy's source/extensions/filters/http/
// rate_limit_quota (global_client_impl.cc, filter.cc,
// filter_persistence.cc) and source/common/common/token_bucket_impl.h,
// read as of 2026, including where it departs from the API's comments:
//
//   - A bucket is reported once at once when its first request arrives
//     (its time elapsed 0 s), then with every other bucket every
//     ReportInterval (5 s whatever reporting_interval says), each report
//     with the counts since the last and the time elapsed truncated to
//     whole seconds; every message names the domain.
//   - An action for a bucket the filter does not hold is ignored; so is an
//     assignment of requests_per_time_unit ("not yet supported") or of no
//     strategy: the assignment before it stays.
//   - A token bucket assigned again is kept, with its tokens, when its
//     max_tokens, tokens_per_fill and the nanoseconds of its fill_interval
//     are the same (the seconds are not compared); otherwise a new one
//     starts full.
//   - An assignment's time to live counts in whole seconds, and an unset or
//     zero one expires at once; when it expires the bucket falls back to
//     the filter's behaviour with no assignment (ALLOW_ALL unless set).
//   - An abandon action forgets the bucket: its next request makes it
//     again, and reports it at once.
//   - A token bucket refills continuously at tokens_per_fill per whole
//     second of fill_interval (a fill interval under a second lets every
//     request through), holds at most max_tokens, and lets a request
//     through when it holds a whole token.
package rlqsenvoy

import (
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ReportInterval is how often the filter reports every bucket it holds:
// 5 s, as Envoy hard-codes it.
const ReportInterval = 5 * time.Second

// Filter is one Envoy's filter: its buckets and their assignments. The
// zero Filter is not ready: make one with New. It is not safe for
// concurrent use; the time is the caller's.
type Filter struct {
	domain string
	// noAssignment is what a bucket without an assignment does (Envoy's
	// no_assignment_behavior.fallback_rate_limit): nil lets every request
	// through.
	noAssignment *typev3.RateLimitStrategy
	buckets      map[string]*bucket
}

// bucket is one bucket the filter holds.
type bucket struct {
	id              map[string]string
	allowed, denied uint64
	lastReport      time.Time
	// assigned is the strategy in force, nil for none; expires is when
	// its time to live ends.
	assigned *typev3.RateLimitStrategy
	expires  time.Time
	tokens   *tokenBucket // for an assigned token bucket
}

// Option configures a Filter.
type Option func(*Filter)

// WithNoAssignment sets what a bucket without an assignment does (Envoy's
// no_assignment_behavior): a blanket rule (a token bucket there is not
// enforced by Envoy's filter either, which never makes it one).
func WithNoAssignment(s *typev3.RateLimitStrategy) Option {
	return func(f *Filter) { f.noAssignment = s }
}

// New returns the filter of an Envoy whose reports name domain.
func New(domain string, opts ...Option) *Filter {
	f := &Filter{domain: domain, buckets: map[string]*bucket{}}
	for _, o := range opts {
		o(f)
	}
	return f
}

// keyOf names a bucket id: equal maps name one bucket.
func keyOf(id map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(id)) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(id[k])
		b.WriteByte(0)
	}
	return b.String()
}

// Request decides a request of the bucket id at now, as the filter does,
// and counts it. A bucket's first request makes the bucket and returns
// the report the filter sends of it at once; otherwise first is nil.
func (f *Filter) Request(id map[string]string, now time.Time) (allowed bool, first *rlqsv3.RateLimitQuotaUsageReports) {
	k := keyOf(id)
	b, ok := f.buckets[k]
	if !ok {
		b = &bucket{id: maps.Clone(id), lastReport: now}
		f.buckets[k] = b
		// The first request is decided by the behaviour without an
		// assignment, only a blanket DENY_ALL refusing it.
		allowed = f.noAssignment.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL
		if allowed {
			b.allowed++
		} else {
			b.denied++
		}
		return allowed, &rlqsv3.RateLimitQuotaUsageReports{Domain: f.domain,
			BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{b.usage(now)}}
	}
	allowed = b.allows(f, now)
	if allowed {
		b.allowed++
	} else {
		b.denied++
	}
	return allowed, nil
}

// allows reports whether b lets a request through at now: its assignment
// while it lasts, else the behaviour without one.
func (b *bucket) allows(f *Filter, now time.Time) bool {
	s := f.noAssignment
	if b.assigned != nil && now.Before(b.expires) {
		s = b.assigned
	}
	switch {
	case s == nil:
		return true
	case s.GetTokenBucket() != nil:
		if s != b.assigned || b.tokens == nil {
			return true // never made one: Envoy's filter fails open (or worse)
		}
		return b.tokens.consume(now)
	case s.GetRequestsPerTimeUnit() != nil:
		return true // "not yet supported": fails open
	}
	return s.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL
}

// usage returns b's usage since its last report, at now, and starts the
// next: the counts go back to zero.
func (b *bucket) usage(now time.Time) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           &rlqsv3.BucketId{Bucket: maps.Clone(b.id)},
		TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.lastReport) / time.Second)},
		NumRequestsAllowed: b.allowed,
		NumRequestsDenied:  b.denied,
	}
	b.allowed, b.denied, b.lastReport = 0, 0, now
	return u
}

// Report returns the report the filter sends at now (every ReportInterval):
// every bucket it holds, idle ones too; nil when it holds none.
func (f *Filter) Report(now time.Time) *rlqsv3.RateLimitQuotaUsageReports {
	if len(f.buckets) == 0 {
		return nil
	}
	r := &rlqsv3.RateLimitQuotaUsageReports{Domain: f.domain}
	for _, k := range slices.Sorted(maps.Keys(f.buckets)) {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, f.buckets[k].usage(now))
	}
	return r
}

// Buckets returns how many buckets the filter holds.
func (f *Filter) Buckets() int { return len(f.buckets) }

// Apply applies a quota server's response at now, as the filter does.
func (f *Filter) Apply(resp *rlqsv3.RateLimitQuotaResponse, now time.Time) {
	for _, a := range resp.GetBucketAction() {
		id := a.GetBucketId().GetBucket()
		if len(id) == 0 {
			continue
		}
		k := keyOf(id)
		b, ok := f.buckets[k]
		if !ok {
			continue // the server cannot make a bucket the filter does not hold
		}
		if a.GetAbandonAction() != nil {
			delete(f.buckets, k)
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		if qa == nil {
			continue
		}
		s := qa.GetRateLimitStrategy()
		switch {
		case s.GetStrategy() == nil, s.GetRequestsPerTimeUnit() != nil:
			continue // ignored: the assignment before stays, and its time to live
		case s.GetTokenBucket() != nil:
			if b.tokens == nil || !b.current(now) || b.assigned.GetTokenBucket() == nil ||
				!sameTokenBucket(b.assigned.GetTokenBucket(), s.GetTokenBucket()) {
				b.tokens = newTokenBucket(s.GetTokenBucket(), now)
			}
		default:
			b.tokens = nil
		}
		b.assigned = s
		// Whole seconds: an unset or zero time to live expires at once.
		b.expires = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
	}
}

// current reports whether b's assignment is still in force at now.
func (b *bucket) current(now time.Time) bool { return b.assigned != nil && now.Before(b.expires) }

// sameTokenBucket reports whether a and b are the same token bucket as
// Envoy's filter compares them: max_tokens, tokens_per_fill and the
// nanoseconds of fill_interval (not its seconds).
func sameTokenBucket(a, b *typev3.TokenBucket) bool {
	return a.GetMaxTokens() == b.GetMaxTokens() && a.GetTokensPerFill().GetValue() == b.GetTokensPerFill().GetValue() &&
		a.GetFillInterval().GetNanos() == b.GetFillInterval().GetNanos()
}

// minFillRate is the least rate of Envoy's token bucket: a token a year.
const minFillRate = 1.0 / (365 * 24 * 3600)

// tokenBucket is Envoy's AtomicTokenBucketImpl: it keeps an instant, at,
// from which it has been refilling, and holds min(max, (now-at)·rate).
type tokenBucket struct {
	max  float64
	rate float64 // tokens a second; +Inf lets everything through
	at   time.Time
}

// newTokenBucket returns the token bucket of tb at now, full.
func newTokenBucket(tb *typev3.TokenBucket, now time.Time) *tokenBucket {
	t := &tokenBucket{max: float64(tb.GetMaxTokens())}
	switch secs := tb.GetFillInterval().GetSeconds(); {
	case secs <= 0:
		t.rate = math.Inf(1) // a division by zero in Envoy
	default:
		t.rate = max(float64(tb.GetTokensPerFill().GetValue())/float64(secs), minFillRate)
	}
	t.at = now.Add(-t.span(t.max))
	return t
}

// span is how long the bucket takes to refill n tokens.
func (t *tokenBucket) span(n float64) time.Duration {
	if math.IsInf(t.rate, 1) {
		return 0
	}
	return time.Duration(n / t.rate * float64(time.Second))
}

// consume takes a token at now if the bucket holds a whole one.
func (t *tokenBucket) consume(now time.Time) bool {
	if math.IsInf(t.rate, 1) {
		return t.max >= 1
	}
	held := min(t.max, now.Sub(t.at).Seconds()*t.rate)
	if held < 1 {
		return false
	}
	// From the instant at which it held what it holds now, one token on.
	t.at = now.Add(-t.span(held)).Add(t.span(1))
	return true
}

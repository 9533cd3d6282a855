package rlqs

import (
	"maps"
	"math"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// Assignments. Envoy's filter reports every 5 s, whatever its
// reporting_interval says; keeps a token bucket assigned again with its
// tokens only if it is the same, and starts a changed one full; counts a
// time to live in whole seconds, an unset one expiring at once. So an
// assignment is a token bucket of whole seconds, changed only when its
// rate moves by a step (quantized), and sent again before half its time
// to live has passed, which then only extends it.
const (
	// ReportInterval is how often Envoy's filter reports.
	ReportInterval = 5 * time.Second
	// TTL is how long an assignment lasts: three reports, so that one
	// lost answer does not drop an Envoy back to its behaviour without
	// one.
	TTL = 3 * ReportInterval
	// maxDenyTTL bounds a DENY_ALL's time to live: a window that frees
	// later is denied again at the next report.
	maxDenyTTL = time.Minute
)

// spent reports whether nothing of q's limit remains until it frees.
func spent(q envoyrls.QuotaDecision) bool { return q.Limited && (q.Over || q.Remaining <= 0) }

// paced reports whether q is a limit whose remains are shared out as
// token buckets: limited, enforced, not spent.
func paced(q envoyrls.QuotaDecision) bool {
	return q.Limited && !q.Concurrent && !q.Shadow && !q.Unlimited && !spent(q)
}

// pace returns the rate, a second, at which the whole fleet may spend q's
// limit: what remains, evenly until the reset (a token bucket's: until it
// is full again, so that a full bucket's burst is spent within a report
// and an emptier one's at about its refill); a sliding window also frees
// what its previous window counted as that window slides out, which at a
// steady rate is what the window holds beside what remains, over its
// length.
func pace(q envoyrls.QuotaDecision) float64 {
	r := float64(q.Remaining) / max(q.UntilReset, ReportInterval).Seconds()
	if q.Algorithm == ratelimit.SlidingWindow && q.Window > 0 {
		r += float64(max(q.Quota-q.Remaining, 0)) / q.Window.Seconds()
	}
	return r
}

// bucket is one bucket of one stream: its demand and what it was sent.
type bucket struct {
	// key names the bucket across streams: workspace, domain and bucket
	// id (another workspace's bucket of the same id is another bucket);
	// idKey names it within its stream, the bucket id alone (see keyOf).
	key, idKey string
	id         map[string]string
	// entries are the id's, in key order: the descriptor it is decided
	// as; identifier names its counter in the analytics, and demandTally
	// and presentTally its fleet tallies (see fleet.go). Each is made
	// once, at the bucket's first report.
	entries                               []*rlcommonv3.RateLimitDescriptor_Entry
	identifier, demandTally, presentTally string
	// demand is what the Envoy was asked in its last report that counted
	// time, allowed and denied, a second; known once there was one.
	demand float64
	known  bool
	// lastActive is when a report last counted a request of it (or its
	// first report).
	lastActive time.Time
	sent       *typev3.RateLimitStrategy
	sentAt     time.Time
	ttl        time.Duration
}

// newBucket returns the bucket of id (whose keys in order are keys, and
// keyOf is key) on a stream of workspace in domain, first reported at now.
func newBucket(workspace, domain, key string, id map[string]string, keys []string, now time.Time) *bucket {
	b := &bucket{key: workspace + "\x00" + domain + "\x00" + key, idKey: key, id: maps.Clone(id), lastActive: now}
	named := make([]rlsconfig.Entry, len(keys))
	for i, k := range keys {
		b.entries = append(b.entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: k, Value: id[k]})
		named[i] = rlsconfig.Entry{Key: k, Value: id[k]}
	}
	b.identifier = rlsconfig.Identifier(named)
	b.demandTally, b.presentTally = tallyName("demand", b.key), tallyName("present", b.key)
	return b
}

// observe takes u, a report of b.
func (b *bucket) observe(u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	if secs := u.GetTimeElapsed().GetSeconds(); secs > 0 {
		b.demand = float64(u.GetNumRequestsAllowed()+u.GetNumRequestsDenied()) / float64(secs)
		b.known = true
	}
}

// assign returns the action to send b of st, decided as q with share (0
// to 1) of the fleet's budget, at now, or nil when what it holds stands.
// A spent limit is denied (and so is every other bucket of its key on
// this process's streams, at once): a window until its reset, a sliding
// window or a token bucket, which free a little at every moment, until
// the next reports decide again.
func (s *Service) assign(st *stream, b *bucket, q envoyrls.QuotaDecision, share float64, now time.Time) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	var strategy *typev3.RateLimitStrategy
	ttl := TTL
	switch {
	case q.Unlimited || q.Shadow:
		strategy = blanket(typev3.RateLimitStrategy_ALLOW_ALL)
	case !q.Limited || q.Concurrent:
		strategy = blanket(s.noRule)
	case spent(q):
		strategy = blanket(typev3.RateLimitStrategy_DENY_ALL)
		if q.Algorithm == ratelimit.FixedWindow {
			ttl = min(max(q.UntilReset.Truncate(time.Second)+time.Second, time.Second), maxDenyTTL)
		}
		if !isDeny(b.sent) {
			for _, o := range s.subs.others(b.key, st) {
				o.deny(b.idKey, ttl)
			}
		}
	default:
		strategy = tokenBucket(pace(q) * share)
	}
	if b.sent != nil && proto.Equal(b.sent, strategy) && now.Sub(b.sentAt) < b.ttl/2 {
		return nil
	}
	b.sent, b.sentAt, b.ttl = strategy, now, ttl
	return b.action(strategy, ttl)
}

// action returns the assignment of strategy to b for ttl.
func (b *bucket) action(strategy *typev3.RateLimitStrategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqsv3.BucketId{Bucket: b.id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: strategy}}}
}

// isDeny reports whether s is DENY_ALL.
func isDeny(s *typev3.RateLimitStrategy) bool {
	return s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL && s.GetStrategy() != nil
}

// blanket returns a blanket rule.
func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

// tokenBucket returns the token bucket of about perSecond requests a
// second, rounded to a step of a quarter power of two (so that a rate
// that moves a little keeps its bucket, and its tokens), in whole seconds,
// each within a few percent of it: tokens a second from ten a second;
// tokens every 5 s from one a second (1.41 a second is 7 every 5 s, not 1
// a second); tokens every 10 s from a tenth of one (0.84 a second is 8
// every 10 s, not 1 every 2 s); one token every few seconds below. It holds
// one fill. Envoy compares two buckets'
// fill intervals by their nanoseconds alone, and rates them by their whole
// seconds: a fill interval of s seconds carries s nanoseconds, so that one
// of another length is taken for a change.
func tokenBucket(perSecond float64) *typev3.RateLimitStrategy {
	q := quantize(perSecond)
	perFill, every := uint32(1), int64(1)
	switch {
	case q >= 10:
		perFill = uint32(min(math.Round(q), math.MaxUint32))
	case q >= 1:
		perFill, every = uint32(math.Round(q*5)), 5
	case q >= 0.1:
		perFill, every = uint32(math.Round(q*10)), 10
	default:
		every = int64(math.Round(1 / max(q, 1.0/3600)))
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: perFill, TokensPerFill: wrapperspb.UInt32(perFill),
		FillInterval: &durationpb.Duration{Seconds: every, Nanos: int32(every)}}}}
}

// quantize rounds r to the nearest quarter power of two: 1, 1.19, 1.41,
// 1.68, 2, …; 0 for none.
func quantize(r float64) float64 {
	if r <= 0 {
		return 0
	}
	return math.Pow(2, math.Round(math.Log2(r)*4)/4)
}

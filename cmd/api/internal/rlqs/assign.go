package rlqs

import (
	"math"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
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
	// idleShare is the least share of an Envoy's weight: a tenth of an
	// equal share, so that one that was idle can start.
	idleShare = 0.1
)

// limit is what a bucket's rule leaves of it.
type limit struct {
	// limited is false for a bucket no rule limits.
	limited, over bool
	remaining     int64
	untilReset    time.Duration
}

// bucket is one bucket of one stream: its demand and what it was sent.
type bucket struct {
	// key names the bucket across streams: domain and bucket id.
	key string
	id  map[string]string
	// demand is what the Envoy was asked in its last report that counted
	// time, allowed and denied, a second.
	demand float64
	sent   *typev3.RateLimitStrategy
	sentAt time.Time
}

// observe takes u, a report of b, at now.
func (b *bucket) observe(u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, now time.Time) {
	if secs := u.GetTimeElapsed().GetSeconds(); secs > 0 {
		b.demand = float64(u.GetNumRequestsAllowed()+u.GetNumRequestsDenied()) / float64(secs)
	}
}

// shares holds, for each bucket, the streams of this process subscribed
// to it: what its budget is shared among.
type shares struct {
	mu    sync.Mutex
	byKey map[string]map[*stream]*bucket
}

func newShares() *shares { return &shares{byKey: map[string]map[*stream]*bucket{}} }

// share returns b's share (0 to 1) of its bucket's budget, subscribing st.
func (s *shares) share(st *stream, b *bucket) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	subs, ok := s.byKey[b.key]
	if !ok {
		subs = map[*stream]*bucket{}
		s.byKey[b.key] = subs
	}
	subs[st] = b
	var total float64
	for _, o := range subs {
		total += o.demand
	}
	if total == 0 {
		return 1 / float64(len(subs))
	}
	least := idleShare * total / float64(len(subs))
	var weights float64
	for _, o := range subs {
		weights += max(o.demand, least)
	}
	return max(b.demand, least) / weights
}

// leave unsubscribes st from every bucket.
func (s *shares) leave(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range st.buckets {
		if subs := s.byKey[b.key]; subs != nil {
			delete(subs, st)
			if len(subs) == 0 {
				delete(s.byKey, b.key)
			}
		}
	}
}

// assign returns the action to send b of st, whose limit is lim, at now,
// or nil when what it holds stands.
func (s *Service) assign(st *stream, b *bucket, lim limit, now time.Time) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	var strategy *typev3.RateLimitStrategy
	ttl := TTL
	share := s.shares.share(st, b)
	switch {
	case !lim.limited:
		strategy = blanket(typev3.RateLimitStrategy_ALLOW_ALL)
	case lim.over || lim.remaining <= 0:
		strategy = blanket(typev3.RateLimitStrategy_DENY_ALL)
		ttl = min(max(lim.untilReset.Truncate(time.Second)+time.Second, time.Second), maxDenyTTL)
	default:
		// What remains, spent evenly until the reset, this Envoy's share
		// of it a second.
		perSecond := float64(lim.remaining) / max(lim.untilReset, ReportInterval).Seconds() * share
		strategy = tokenBucket(perSecond)
	}
	if b.sent != nil && proto.Equal(b.sent, strategy) && now.Sub(b.sentAt) < ttl/2 {
		return nil
	}
	b.sent, b.sentAt = strategy, now
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqsv3.BucketId{Bucket: b.id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: strategy}}}
}

// blanket returns a blanket rule.
func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

// tokenBucket returns the token bucket of about perSecond requests a
// second, rounded down to a step of a quarter power of two (so that a
// rate that moves a little keeps its bucket, and its tokens), in whole
// seconds: tokens a second at one a second or more, one token every few
// seconds below. It holds one fill. Envoy compares two buckets' fill
// intervals by their nanoseconds alone, and rates them by their whole
// seconds: a fill interval of s seconds carries s nanoseconds, so that one
// of another length is taken for a change.
func tokenBucket(perSecond float64) *typev3.RateLimitStrategy {
	q := quantize(perSecond)
	perFill, every := uint32(1), int64(1)
	if q >= 1 {
		perFill = uint32(min(q, math.MaxUint32))
	} else {
		every = int64(math.Ceil(1 / max(q, 1.0/3600)))
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: perFill, TokensPerFill: wrapperspb.UInt32(perFill),
		FillInterval: &durationpb.Duration{Seconds: every, Nanos: int32(every)}}}}
}

// quantize rounds r down to a quarter power of two: 1, 1.19, 1.41, 1.68,
// 2, …; 0 for none.
func quantize(r float64) float64 {
	if r <= 0 {
		return 0
	}
	return math.Pow(2, math.Floor(math.Log2(r)*4)/4)
}

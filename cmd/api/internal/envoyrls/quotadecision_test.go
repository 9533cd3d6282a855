package envoyrls

import (
	"context"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// TestQuotaNamesTheModel: Quota decides a descriptor as ShouldRateLimit
// does (its hits counted) and says what decided it: each model with its
// quota in its window, an unlimited rule apart from no rule, a
// concurrency rule without deciding it (no slot taken), and shadow mode,
// the service's and a rule's.
func TestQuotaNamesTheModel(t *testing.T) {
	const rules = "domain: d\ndescriptors:\n" +
		"  - {key: s, rate_limit: {unit: minute, requests_per_unit: 100}}\n" +
		"  - {key: f, rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window}}\n" +
		"  - {key: b, rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 10}}\n" +
		"  - {key: c, rate_limit: {unit: minute, requests_per_unit: 3, algorithm: concurrency}}\n" +
		"  - {key: u, rate_limit: {unlimited: true}}\n" +
		"  - {key: sh, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}}\n"
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	desc := func(key string, hits uint64) *rlcommonv3.RateLimitDescriptor {
		return &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}},
			HitsAddend: wrapperspb.UInt64(hits)}
	}
	s, _ := newService(t, rules)
	for _, tc := range []struct {
		key       string
		hits      uint64
		want      QuotaDecision
		untilNear time.Duration // UntilReset within a second of it, if set
	}{
		{"s", 40, QuotaDecision{Limited: true, Remaining: 60, Algorithm: ratelimit.SlidingWindow, Quota: 100, Window: time.Minute}, 0},
		{"f", 100, QuotaDecision{Limited: true, Remaining: 0, Algorithm: ratelimit.FixedWindow, Quota: 100, Window: time.Minute}, 0},
		{"f", 1, QuotaDecision{Limited: true, Over: true, Remaining: 0, Algorithm: ratelimit.FixedWindow, Quota: 100, Window: time.Minute}, 0},
		{"b", 5, QuotaDecision{Limited: true, Remaining: 5, Algorithm: ratelimit.TokenBucket, Quota: 10, Window: 10 * time.Second}, 5 * time.Second},
		{"c", 1, QuotaDecision{Concurrent: true}, 0},
		{"u", 1, QuotaDecision{Unlimited: true, Remaining: 1<<32 - 1}, 0},
		{"sh", 5, QuotaDecision{Limited: true, Shadow: true, Remaining: 0, Algorithm: ratelimit.FixedWindow, Quota: 1, Window: time.Minute}, 0},
		{"none", 1, QuotaDecision{}, 0},
	} {
		got, err := s.Quota(ctx, "d", desc(tc.key, tc.hits))
		if err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		until := got.UntilReset
		got.UntilReset = 0
		if got != tc.want {
			t.Errorf("%s, %d hits: %+v, want %+v", tc.key, tc.hits, got, tc.want)
		}
		if tc.untilNear > 0 && (until < tc.untilNear-time.Second || until > tc.untilNear+time.Second) {
			t.Errorf("%s: until reset %v, want about %v", tc.key, until, tc.untilNear)
		}
	}
	if st, _ := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("c", 0)}}); st.Statuses[0].LimitRemaining != 3 {
		t.Errorf("the concurrency rule after Quota: %v, want no slot taken", st.Statuses[0])
	}
	shadow, _ := newService(t, rules, WithShadowMode(true))
	shadow.Quota(ctx, "d", desc("f", 100))
	if got, _ := shadow.Quota(ctx, "d", desc("f", 1)); !got.Shadow || got.Over {
		t.Errorf("shadow mode: %+v, want Shadow and never Over", got)
	}
}

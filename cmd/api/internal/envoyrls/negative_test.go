package envoyrls

import (
	"context"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// TestNegativeHits: a descriptor with is_negative_hits gives its hits back
// to every limit of its rule, never below zero, and is answered OK: a
// fixed window admits again what was given back, and no more once it held
// nothing; a rule of two limits gets them back in both windows; a
// concurrency rule releases a slot; a token bucket gets tokens back up to
// its burst.
func TestNegativeHits(t *testing.T) {
	const rules = `domain: d
descriptors:
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
  - key: two
    rate_limits:
      - {unit: minute, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 8}
  - key: slots
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket}
`
	clock := &manualClock{now: time.Date(2027, 1, 4, 10, 0, 0, 0, time.UTC)}
	limiter, err := ratelimit.New("test", ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newServiceOn(t, limiter, rules, prometheus.NewRegistry(), WithClock(clock.Now), WithOverLimitHitsCounted(false))
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	send := func(key string, hits uint64, negative bool) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
			Entries:    []*rlcommonv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}},
			HitsAddend: wrapperspb.UInt64(hits), IsNegativeHits: negative}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	admit := func(key string, n int) (ok int) {
		t.Helper()
		for range n {
			if send(key, 1, false).OverallCode == rlsv3.RateLimitResponse_OK {
				ok++
			}
		}
		return ok
	}
	if resp := send("fixed", 0, false); resp.Statuses[0].LimitRemaining != 5 {
		t.Fatalf("fixed: a check: %v", resp)
	}
	// Each step gives back (give) and then makes hits (of which want
	// admitted), after advance.
	for _, step := range []struct {
		why        string
		key        string
		advance    time.Duration
		give       uint64
		hits, want int
	}{
		{"fixed: the limit", "fixed", 0, 0, 7, 5},
		{"fixed: 3 given back", "fixed", 0, 3, 7, 3},
		{"fixed: 100 given back with 5 counted (never below zero)", "fixed", 0, 100, 7, 5},
		{"two limits: the minute's", "two", 0, 0, 6, 5},
		{"two limits: 2 given back to both windows", "two", 0, 2, 6, 2},
		{"two limits: two minutes on, the hour's 3 left of 8 (5, less 2, and 2 more)", "two", 2 * time.Minute, 0, 6, 3},
		{"slots: the limit", "slots", 0, 0, 3, 2},
		{"slots: one released", "slots", 0, 1, 3, 1},
		{"bucket: its burst", "bucket", 0, 0, 7, 5},
		{"bucket: 2 tokens back", "bucket", 0, 2, 3, 2},
		{"bucket: 100 back fill it, no more", "bucket", 0, 100, 7, 5},
	} {
		clock.now = clock.now.Add(step.advance)
		if step.give > 0 {
			if resp := send(step.key, step.give, true); resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("%s: negative hits answered %v, want OK", step.why, resp)
			}
		}
		if n := admit(step.key, step.hits); n != step.want {
			t.Fatalf("%s: %d admitted of %d, want %d", step.why, n, step.hits, step.want)
		}
	}
}

// TestNegativeHitsAsHitsCount: negative hits are given back as the hits
// were counted: under an override of a rule of two limits, once, to the
// override's one window (before: once a limit, to that same window, twice
// the hits); with UNKEY_RLS_FIXED_WINDOWS, to the fixed window of a token
// bucket's rule, which is what counted them.
func TestNegativeHitsAsHitsCount(t *testing.T) {
	const rules = `domain: d
descriptors:
  - key: two
    rate_limits:
      - {unit: minute, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 8}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket, burst: 10}
`
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	send := func(s *Service, key string, hits uint64, negative bool) bool {
		t.Helper()
		resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
			Entries:    []*rlcommonv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}},
			HitsAddend: wrapperspb.UInt64(hits), IsNegativeHits: negative}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode == rlsv3.RateLimitResponse_OK
	}
	admit := func(s *Service, key string, n int) (ok int) {
		for range n {
			if send(s, key, 1, false) {
				ok++
			}
		}
		return ok
	}
	s, ov := newService(t, rules, WithOverLimitHitsCounted(false))
	if _, err := ov.Set(ctx, overrides.Override{Workspace: access.OpenWorkspace, Namespace: "envoy:d", Identifier: "two=v",
		Limit: 4, Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if n := admit(s, "two", 6); n != 4 {
		t.Fatalf("under an override of 4: %d admitted", n)
	}
	send(s, "two", 2, true)
	if n := admit(s, "two", 6); n != 2 {
		t.Fatalf("under an override of 4, 2 given back: %d admitted, want 2", n)
	}

	fixed, _ := newService(t, rules, WithOverLimitHitsCounted(false), WithFixedWindows(true))
	if n := admit(fixed, "bucket", 7); n != 5 {
		t.Fatalf("fixed windows: the bucket's rule admitted %d, want its fixed window's 5", n)
	}
	send(fixed, "bucket", 3, true)
	if n := admit(fixed, "bucket", 7); n != 3 {
		t.Fatalf("fixed windows: %d admitted after 3 given back, want 3", n)
	}
}

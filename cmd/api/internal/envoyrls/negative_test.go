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
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// TestNegativeHits: a descriptor with is_negative_hits gives its hits back
// to every limit of its rule, never below zero, and is answered OK: a
// fixed window admits again what was given back, and no more once it held
// nothing; a rule of two limits gets them back in both windows; a
// concurrency rule releases a slot; a token bucket gets nothing back.
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
	if n := admit("fixed", 7); n != 5 {
		t.Fatalf("fixed: %d admitted of 5", n)
	}
	if resp := send("fixed", 3, true); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("fixed: negative hits of 3: %v; want OK, 3 remaining", resp)
	}
	if n := admit("fixed", 7); n != 3 {
		t.Fatalf("fixed: %d admitted after 3 given back", n)
	}
	send("fixed", 100, true)
	if n := admit("fixed", 7); n != 5 {
		t.Fatalf("fixed: %d admitted after 100 given back with 5 counted; want 5 (never below zero)", n)
	}

	if n := admit("two", 6); n != 5 {
		t.Fatalf("two limits: %d admitted of the minute's 5", n)
	}
	send("two", 2, true)
	// The minute's window holds 3 and the hour's 3: 2 more in the minute.
	if n := admit("two", 6); n != 2 {
		t.Fatalf("two limits: %d admitted after 2 given back, want 2", n)
	}
	clock.now = clock.now.Add(2 * time.Minute)
	// The minute's window is empty again; the hour's holds 5 of 8 (5,
	// less the 2 given back, and 2 more): 3 more.
	if n := admit("two", 6); n != 3 {
		t.Fatalf("two limits: %d admitted two minutes on, want the hour's 3 left of 8", n)
	}

	if n := admit("slots", 3); n != 2 {
		t.Fatalf("slots: %d taken of 2", n)
	}
	send("slots", 1, true)
	if n := admit("slots", 3); n != 1 {
		t.Fatalf("slots: %d taken after one was given back, want 1", n)
	}

	if n := admit("bucket", 7); n != 5 {
		t.Fatalf("bucket: %d admitted of its burst of 5", n)
	}
	send("bucket", 5, true)
	if n := admit("bucket", 1); n != 0 {
		t.Fatalf("bucket: %d admitted after negative hits: a bucket gets nothing back", n)
	}
}

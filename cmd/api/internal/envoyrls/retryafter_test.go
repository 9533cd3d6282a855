package envoyrls

import (
	"context"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// retryAfter returns the Retry-After header of resp, "" if none.
func retryAfter(resp *rlsv3.RateLimitResponse) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.Key == "Retry-After" {
			return h.Value
		}
	}
	return ""
}

// TestRetryAfter: a refusal carries Retry-After, the seconds (rounded
// up) until the request would pass with no other traffic, as its models
// compute the wait: a fixed window's end, a token bucket's next token,
// the longest wait of the descriptors over their limits, the shortest of
// spent quotas; an answer no wait helps (a rule of 0), an admission, a
// shadow mode's OK and the setting off carry none.
func TestRetryAfter(t *testing.T) {
	const rules = `domain: d
descriptors:
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 4, algorithm: token_bucket}
  - key: never
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: fixed_window}
`
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	// 15.2 s into a minute, and into an hour.
	start := time.Date(2026, 11, 29, 10, 0, 15, 200_000_000, time.UTC)
	newAt := func(opts ...Option) (*Service, *manualClock) {
		t.Helper()
		clock := &manualClock{now: start}
		limiter, err := ratelimit.New("test", ratelimit.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		s, _ := newServiceOn(t, limiter, rules, prometheus.NewRegistry(), opts...)
		s.now = clock.Now
		return s, clock
	}
	ask := func(s *Service, descriptors ...*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descriptors})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	d := func(key string) *rlcommonv3.RateLimitDescriptor { return one(key, "v")[0] }

	s, _ := newAt()
	for i, want := range []string{"", "", "45"} { // the window ends 44.8 s on
		resp := ask(s, d("fixed"))
		if got := retryAfter(resp); got != want || (want != "") != (resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT) {
			t.Errorf("fixed window, call %d: %v with Retry-After %q, want %q", i+1, resp.OverallCode, got, want)
		}
	}
	// A bucket of 4 refilled at 4 an hour: a token every 900 s. A hit over
	// the limit is counted (as envoyproxy/ratelimit counts it), so the
	// fifth leaves the bucket a token in debt: the next hit passes when
	// two tokens have come, 1800 s on.
	for i, want := range []string{"", "", "", "", "1800"} {
		if got := retryAfter(ask(s, d("bucket"))); got != want {
			t.Errorf("token bucket, call %d: Retry-After %q, want %q", i+1, got, want)
		}
	}
	// Over two limits: the longer wait (the bucket's, a third token on).
	if got := retryAfter(ask(s, d("fixed"), d("bucket"))); got != "2700" {
		t.Errorf("over a window and a bucket: Retry-After %q, want 2700", got)
	}
	if resp := ask(s, d("fixed"), d("never")); retryAfter(resp) != "" || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("over a rule of 0: %v with Retry-After %q, want OVER_LIMIT without it", resp.OverallCode, retryAfter(resp))
	}
	// Quotas: refused once both are spent, and then the first to free
	// serves: the minute's, 45 s on.
	if resp := ask(s, d("quota_a"), d("quota_b")); resp.OverallCode != rlsv3.RateLimitResponse_OK || retryAfter(resp) != "" {
		t.Errorf("quotas with room: %v, Retry-After %q", resp.OverallCode, retryAfter(resp))
	}
	if resp := ask(s, d("quota_a"), d("quota_b")); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || retryAfter(resp) != "45" {
		t.Errorf("quotas spent: %v, Retry-After %q, want OVER_LIMIT and 45", resp.OverallCode, retryAfter(resp))
	}

	// A hit sent when Retry-After says passes, counted over the limit or
	// not: the bucket's, and a sliding window's.
	s, clock := newAt()
	for range 4 {
		ask(s, d("bucket"))
	}
	wait := retryAfter(ask(s, d("bucket")))
	secs, _ := time.ParseDuration(wait + "s")
	clock.advance(secs)
	if resp := ask(s, d("bucket")); wait == "" || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("the bucket's hit %s s after a refusal that said Retry-After %q: %v", wait, wait, resp.OverallCode)
	}
	// Three hits in a sliding minute of 2 (the third counted): the next
	// passes once the previous window's 3, weighed by the overlap and
	// truncated, count 1 at most: past 20 s into the next window, 64.8 s
	// on.
	for i, want := range []string{"", "", "65"} {
		if got := retryAfter(ask(s, d("sliding"))); got != want {
			t.Fatalf("sliding window, call %d: Retry-After %q, want %q", i+1, got, want)
		}
	}
	clock.advance(65 * time.Second)
	if resp := ask(s, d("sliding")); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("the sliding window's hit 65 s after a refusal that said so: %v", resp.OverallCode)
	}

	off, _ := newAt(WithRetryAfter(false))
	shadow, _ := newAt(WithShadowMode(true))
	for name, s := range map[string]*Service{"off": off, "shadow mode": shadow} {
		for range 3 {
			if got := retryAfter(ask(s, d("fixed"))); got != "" {
				t.Errorf("%s: Retry-After %q, want none", name, got)
			}
		}
	}
}

package envoyrls

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/penalties"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// TestRulePenalty: a rule's penalty blocks the descriptor's counter name
// once the rule denies it: every hit of it is OVER_LIMIT until the block
// ends, with the block's wait in Retry-After's seconds, whatever its own
// window says; a shadow_mode rule's denials block nothing.
func TestRulePenalty(t *testing.T) {
	cfg, err := rlsconfig.Load(rlsconfig.File{Name: "test.yaml", Data: []byte("domain: d\ndescriptors:\n" +
		"  - {key: ip, penalty: 10m, penalty_max: 1h, rate_limit: {unit: minute, requests_per_unit: 1}}\n" +
		"  - {key: sh, shadow_mode: true, penalty: 10m, rate_limit: {unit: minute, requests_per_unit: 1}}\n")})
	if err != nil {
		t.Fatal(err)
	}
	limiter, err := ratelimit.New("test")
	if err != nil {
		t.Fatal(err)
	}
	box, err := penalties.New()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := newPipeline(t, limiter, pipeline.WithPenalties(box))
	s := newServiceOnPipeline(t, p, cfg, prometheus.NewRegistry())
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	ask := func(key string) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one(key, "1.2.3.4")})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := ask("ip"); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first hit: %v", resp)
	}
	for i := range 3 {
		resp := ask("ip")
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("hit %d after the offence: %v", i, resp)
		}
		if got := retryAfter(resp); got != "600" && got != "599" {
			t.Fatalf("hit %d: Retry-After %q s, want the block's 600", i, got)
		}
	}
	got, err := box.Get(ctx, penalties.Key{Workspace: access.OpenWorkspace, Namespace: "envoy:d", Identifier: "ip=1.2.3.4"})
	if err != nil || got.Length() != (10*time.Minute).Milliseconds() {
		t.Fatalf("the block: %+v, %v", got, err)
	}
	for range 3 {
		if resp := ask("sh"); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("a shadow_mode rule: %v", resp)
		}
	}
	if _, err := box.Get(ctx, penalties.Key{Workspace: access.OpenWorkspace, Namespace: "envoy:d", Identifier: "sh=1.2.3.4"}); err == nil {
		t.Fatal("a shadow_mode rule's denial started a block")
	}
}

package envoyrls

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// benchRoute is an Envoy Gateway route's descriptor key and value.
const benchRoute = "httproute/default/backend/rule/0/match/0/*"

// The same rules, as a file and as the xDS resource Envoy Gateway pushes:
// a route, a header per user a minute, a monthly quota per tenant.
const benchYAML = `domain: default/eg/http
descriptors:
  - key: "` + benchRoute + `"
    value: "` + benchRoute + `"
    descriptors:
      - key: rule-0-match-0
        rate_limit: {unit: minute, requests_per_unit: 1000000}
      - key: rule-1-match-0
        rate_limit: {unit: month, requests_per_unit: 1000000}
`

func benchXDS() *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: benchRoute, Value: benchRoute, Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "rule-0-match-0", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 1000000}},
			{Key: "rule-1-match-0", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: 5, RequestsPerUnit: 1000000}},
		}}}}
}

// BenchmarkShouldRateLimitRules decides Envoy Gateway's requests (two
// descriptors: a user's and a tenant's, over 1,000 of each) by the same
// rules read from a file and pushed over xDS: the compiled rules are one
// type whatever their source, so the two should cost the same.
func BenchmarkShouldRateLimitRules(b *testing.B) {
	fromFile, err := rlsconfig.Load(rlsconfig.File{Name: "rules.yaml", Data: []byte(benchYAML)})
	if err != nil {
		b.Fatal(err)
	}
	fromXDS, err := rlsconfig.LoadXDS(benchXDS())
	if err != nil {
		b.Fatal(err)
	}
	for _, src := range []struct {
		name string
		cfg  *rlsconfig.Config
	}{{"file", fromFile}, {"xds", fromXDS}} {
		b.Run(src.name, func(b *testing.B) {
			limiter, err := ratelimit.New("bench")
			if err != nil {
				b.Fatal(err)
			}
			s, _ := newServiceWith(b, limiter, src.cfg, prometheus.NewRegistry())
			reqs := make([]*rlsv3.RateLimitRequest, 1000)
			for i := range reqs {
				n := strconv.Itoa(i)
				reqs[i] = &rlsv3.RateLimitRequest{Domain: "default/eg/http", Descriptors: []*rlcommonv3.RateLimitDescriptor{
					{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: benchRoute, Value: benchRoute}, {Key: "rule-0-match-0", Value: "user-" + n}}},
					{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: benchRoute, Value: benchRoute}, {Key: "rule-1-match-0", Value: "tenant-" + n}}},
				}}
			}
			ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := s.ShouldRateLimit(ctx, reqs[next.Add(1)%int64(len(reqs))])
					if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
						b.Errorf("%v %v", resp, err)
						return
					}
				}
			})
		})
	}
}

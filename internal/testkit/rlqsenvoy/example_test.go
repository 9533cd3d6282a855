package rlqsenvoy_test

import (
	"fmt"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/unkeyed/ratelimit/internal/testkit/rlqsenvoy"
)

// An Envoy reports a bucket's first request at once, enforces the token
// bucket a quota server assigns it, and reports again ReportInterval
// later.
func Example() {
	now := time.Unix(1_800_000_000, 0)
	envoy := rlqsenvoy.New("api")
	id := map[string]string{"user": "alice"}
	_, first := envoy.Request(id, now)
	fmt.Println("reported at once:", first.BucketQuotaUsages[0].NumRequestsAllowed, "allowed")

	// The server's answer: 2 tokens, 1 more a second, for 15 s.
	envoy.Apply(&rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId: first.BucketQuotaUsages[0].BucketId,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(15 * time.Second),
				RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
					MaxTokens: 2, TokensPerFill: wrapperspb.UInt32(1), FillInterval: durationpb.New(time.Second)}}},
			}}}}}, now)
	for range 3 {
		ok, _ := envoy.Request(id, now)
		fmt.Println("allowed:", ok)
	}
	r := envoy.Report(now.Add(rlqsenvoy.ReportInterval))
	u := r.BucketQuotaUsages[0]
	fmt.Println("reported:", u.NumRequestsAllowed, "allowed,", u.NumRequestsDenied, "denied in", u.TimeElapsed.AsDuration())
	// Output:
	// reported at once: 1 allowed
	// allowed: true
	// allowed: true
	// allowed: false
	// reported: 2 allowed, 1 denied in 5s
}

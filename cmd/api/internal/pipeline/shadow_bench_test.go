package pipeline

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/penalties"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// BenchmarkLimitPolicies decides Limit calls through the pipeline over
// 1,000 identifiers, half of them past their limit: plain, as shadow
// calls, with a penalty (the identifiers past their limit then held by a
// block: a decision the box answers), and with a max wait (a sliding
// window: the calls past their limit of an hour cannot be booked, and
// are denied after the check); on fixed windows, plain and with a max
// wait of an hour (booked into the next hour, then denied); and on token
// buckets, plain and with a max wait, half of them booked ahead until
// their debt's bound. Each on a
// pipeline with penalty boxes, as the API's is (docs/BENCHMARKS.md: a
// decision with a policy beside a plain one).
func BenchmarkLimitPolicies(b *testing.B) {
	for _, policy := range []string{"plain", "shadow", "penalty", "max_wait", "fixed", "fixed_max_wait", "bucket", "bucket_max_wait"} {
		b.Run(policy, func(b *testing.B) {
			box, err := penalties.New()
			if err != nil {
				b.Fatal(err)
			}
			p, _ := newPipeline(b, WithPenalties(box))
			ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
			ids := make([]string, 1000)
			for i := range ids {
				ids[i] = "user_" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				c := Call{Request: req(ids[i%len(ids)], 1<<20)}
				if i%2 == 1 {
					c.Request.Limit = 1 // past it after the first
				}
				switch policy {
				case "shadow":
					c.Shadow = true
				case "penalty":
					c.Penalty = time.Hour
				case "max_wait":
					c.Request.MaxWait = time.Minute
				case "fixed", "fixed_max_wait":
					c.Request.Algorithm = ratelimit.FixedWindow
					if policy == "fixed_max_wait" {
						c.Request.MaxWait = time.Hour
					}
				case "bucket", "bucket_max_wait":
					c.Request.Algorithm = ratelimit.TokenBucket
					if policy == "bucket_max_wait" {
						c.Request.MaxWait = time.Hour
					}
				}
				if _, err := p.Limit(ctx, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

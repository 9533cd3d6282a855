package pipeline

import (
	"context"
	"strconv"
	"testing"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
)

// BenchmarkLimitPolicies decides Limit calls through the pipeline over
// 1,000 identifiers, half of them past their limit: plain, and as shadow
// calls (docs/BENCHMARKS.md: a decision with a policy beside a plain one).
func BenchmarkLimitPolicies(b *testing.B) {
	for _, shadow := range []bool{false, true} {
		name := "plain"
		if shadow {
			name = "shadow"
		}
		b.Run(name, func(b *testing.B) {
			p, _ := newPipeline(b)
			ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
			ids := make([]string, 1000)
			for i := range ids {
				ids[i] = "user_" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				r := req(ids[i%len(ids)], 1<<20)
				if i%2 == 1 {
					r.Limit = 1 // past it after the first
				}
				if _, err := p.Limit(ctx, Call{Request: r, Shadow: shadow}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

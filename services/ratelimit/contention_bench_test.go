package ratelimit

import (
	"context"
	"sync/atomic"
	"testing"
)

// BenchmarkHotKey decides every model's warm request (a limit so high it
// never denies) on one key from as many goroutines as -cpu gives
// (b.SetParallelism(4) of them per core, as a server runs more handlers
// than cores), and reports the decisions denied, every one of them wrong:
// run it with -cpu 1,2,4,8,16.
func BenchmarkHotKey(b *testing.B) {
	ctx := context.Background()
	for _, m := range modelRequests(b) {
		b.Run(m.name, func(b *testing.B) {
			s := benchService(b)
			s.Limit(ctx, m.req)
			var denied atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if resp, _ := s.Limit(ctx, m.req); !resp.Success {
						denied.Add(1)
					}
				}
			})
			b.ReportMetric(float64(denied.Load()), "wrong-denials")
			b.ReportMetric(float64(denied.Load())/float64(b.N)*1e6, "wrong-denials/1M")
		})
	}
}

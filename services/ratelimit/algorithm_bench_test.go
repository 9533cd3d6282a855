package ratelimit

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
)

// modelRequests returns warmRequest as each model decides it: a limit so
// high it never denies (a bucket's burst too), so that every decision does
// the same work.
func modelRequests(b *testing.B) []struct {
	name string
	req  Request
} {
	month, err := calendar.New(calendar.Month, "Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	sliding := warmRequest
	fixed := warmRequest
	fixed.Algorithm = FixedWindow
	bucket := warmRequest
	bucket.Algorithm = TokenBucket
	cal := warmRequest
	cal.Duration, cal.Calendar = 0, month
	return []struct {
		name string
		req  Request
	}{{"sliding", sliding}, {"fixed", fixed}, {"bucket", bucket}, {"calendar", cal}}
}

// BenchmarkModels is LimitWarm, LimitWarmParallel and Limit10kKeys for
// each model: what choosing a model costs a decision.
func BenchmarkModels(b *testing.B) {
	ctx := context.Background()
	for _, m := range modelRequests(b) {
		b.Run(m.name+"/warm", func(b *testing.B) {
			s := benchService(b)
			s.Limit(ctx, m.req)
			b.ReportAllocs()
			for b.Loop() {
				s.Limit(ctx, m.req)
			}
		})
		b.Run(m.name+"/warmParallel", func(b *testing.B) {
			s := benchService(b)
			s.Limit(ctx, m.req)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					s.Limit(ctx, m.req)
				}
			})
		})
		b.Run(m.name+"/10kKeys", func(b *testing.B) {
			s := benchService(b)
			reqs := make([]Request, 10_000)
			for i := range reqs {
				reqs[i] = m.req
				reqs[i].Identifier = "user_" + strconv.Itoa(i)
				s.Limit(ctx, reqs[i])
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.Limit(ctx, reqs[i])
				if i++; i == len(reqs) {
					i = 0
				}
			}
		})
	}
}

// BenchmarkMemoryPerKey reports the live heap of 200,000 keys of each
// model after one decision each (one cell a key).
func BenchmarkMemoryPerKey(b *testing.B) {
	ctx := context.Background()
	for _, m := range modelRequests(b) {
		b.Run(m.name, func(b *testing.B) {
			const keys = 200_000
			for b.Loop() {
				s := newTestService(b, newFakeClock(1_700_000_000_000))
				ids := make([]string, keys)
				for i := range ids {
					ids[i] = "user_" + strconv.Itoa(i)
				}
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				for _, id := range ids {
					r := m.req
					r.Identifier = id
					s.Limit(ctx, r)
				}
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "bytes/key")
				runtime.KeepAlive(s)
				runtime.KeepAlive(ids)
			}
		})
	}
}

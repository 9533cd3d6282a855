package ratelimit

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The yardstick: golang.org/x/time/rate's token bucket, one limiter per key,
// with a limit that never denies so both sides do the same work.
func BenchmarkXTimeRateAllow(b *testing.B) {
	l := rate.NewLimiter(1e9, 1e9)
	b.ReportAllocs()
	for b.Loop() {
		l.Allow()
	}
}

func BenchmarkXTimeRateAllowParallel(b *testing.B) {
	l := rate.NewLimiter(1e9, 1e9)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow()
		}
	})
}

// warmRequest is the request of the warm-key benchmarks: a limit so high it
// never denies, so every decision does the same work.
var warmRequest = Request{Workspace: "ws_1234", Namespace: "api.requests", Identifier: "user_42",
	Limit: 1 << 53, Duration: time.Minute, Cost: 1}

// warmKeys returns n requests on distinct keys, each decided once so that
// its window exists.
func warmKeys(s *Service, n int) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = warmRequest
		reqs[i].Identifier = "user_" + strconv.Itoa(i)
		s.Limit(context.Background(), reqs[i])
	}
	return reqs
}

func benchService(b *testing.B) *Service {
	s, err := New("bench")
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkLimitWarm decides on one warm key with the wall clock, as in
// production. The limit is high enough never to deny.
func BenchmarkLimitWarm(b *testing.B) {
	s := benchService(b)
	r := warmRequest
	ctx := context.Background()
	s.Limit(ctx, r)
	b.ReportAllocs()
	for b.Loop() {
		s.Limit(ctx, r)
	}
}

func BenchmarkLimitWarmParallel(b *testing.B) {
	s := benchService(b)
	r := warmRequest
	ctx := context.Background()
	s.Limit(ctx, r)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Limit(ctx, r)
		}
	})
}

// BenchmarkLimit10kKeys spreads requests over 10,000 warm keys.
func BenchmarkLimit10kKeys(b *testing.B) {
	s := benchService(b)
	reqs := warmKeys(s, 10_000)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Limit(ctx, reqs[i])
		i++
		if i == len(reqs) {
			i = 0
		}
	}
}

func BenchmarkLimit10kKeysParallel(b *testing.B) {
	s := benchService(b)
	reqs := warmKeys(s, 10_000)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s.Limit(ctx, reqs[i])
			i += 7
			if i >= len(reqs) {
				i -= len(reqs)
			}
		}
	})
}

// BenchmarkMultiLimit3 decides batches of three limits.
func BenchmarkMultiLimit3(b *testing.B) {
	s := benchService(b)
	ctx := context.Background()
	batch := []Request{
		{Workspace: "ws", Namespace: "a", Identifier: "user_42", Limit: 1 << 53, Duration: time.Minute, Cost: 1},
		{Workspace: "ws", Namespace: "b", Identifier: "user_42", Limit: 1 << 53, Duration: time.Hour, Cost: 1},
		{Workspace: "ws", Namespace: "c", Identifier: "org_7", Limit: 1 << 53, Duration: time.Second, Cost: 1},
	}
	b.ReportAllocs()
	for b.Loop() {
		s.MultiLimit(ctx, batch)
	}
}

// BenchmarkMemoryPerCell creates one million cells (whatever b.N is) and
// reports the live heap per cell: keys × 1 cell, and keys × 2 cells (the
// steady state of a key with traffic in consecutive windows).
func BenchmarkMemoryPerCell(b *testing.B) {
	for _, cellsPerKey := range []int{1, 2} {
		b.Run("cellsPerKey="+strconv.Itoa(cellsPerKey), func(b *testing.B) {
			const cells = 1_000_000
			keys := cells / cellsPerKey
			for b.Loop() {
				clock := newFakeClock(0)
				s := newTestService(b, clock)
				ctx := context.Background()
				ids := make([]string, keys)
				for i := range ids {
					ids[i] = "user_" + strconv.Itoa(i)
				}
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				for c := 0; c < cellsPerKey; c++ {
					clock.Set(int64(c) * 60_000)
					for _, id := range ids {
						s.Limit(ctx, Request{Workspace: "ws_1234", Namespace: "api.requests", Identifier: id,
							Limit: 100, Duration: time.Minute, Cost: 1})
					}
				}
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/cells, "bytes/cell")
				runtime.KeepAlive(s)
				runtime.KeepAlive(ids)
			}
		})
	}
}

// BenchmarkAcquireRelease takes a slot of a concurrency limit on one warm
// key and frees it: the pair a call in flight costs, beside
// BenchmarkLimitWarm's one decision. The limit is high enough never to
// refuse.
func BenchmarkAcquireRelease(b *testing.B) { benchAcquireRelease(b, false) }

// BenchmarkAcquireReleaseAnswered is BenchmarkAcquireRelease with what a
// release answers its caller, the slots held after it: Release's After,
// read with the release (before issue 57, a check of the pool after it,
// InFlight, which this benchmark then called).
func BenchmarkAcquireReleaseAnswered(b *testing.B) { benchAcquireRelease(b, true) }

// benchAcquireRelease takes a slot and frees it, b.N times; answered
// checks what each release answers.
func benchAcquireRelease(b *testing.B, answered bool) {
	s := benchService(b)
	ctx := context.Background()
	a := Acquisition{Workspace: "ws", Namespace: "bench", Identifier: "user_1", Limit: 1 << 40, Lease: time.Minute, Cost: 1}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := s.Acquire(ctx, a)
		if err != nil || !resp.Success {
			b.Fatal(resp, err)
		}
		ret, err := s.Release(ctx, Slot{Workspace: a.Workspace, Namespace: a.Namespace, Identifier: a.Identifier,
			Limit: a.Limit, Lease: a.Lease, Sequence: LeaseCell(resp, a.Lease), Cost: 1})
		if err != nil {
			b.Fatal(err)
		}
		if answered {
			if after, err := ret.After(ctx); err != nil || after.Limit-after.Remaining != 0 {
				b.Fatal(after, err)
			}
		}
	}
}

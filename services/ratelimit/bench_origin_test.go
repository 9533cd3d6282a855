package ratelimit

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/internal/testserver"
)

// BenchmarkLimitWarmWithOrigin is BenchmarkLimitWarm with a real Redis as
// the regional origin and the replay loop running: the request path should
// cost the same. It also reports the Redis commands the process sent per
// accepted request (EVAL for replays, MGET for reads).
func BenchmarkLimitWarmWithOrigin(b *testing.B) {
	benchWithOrigin(b, false)
}

func BenchmarkLimitWarmWithOriginParallel(b *testing.B) {
	benchWithOrigin(b, true)
}

// benchOriginService starts a Redis and returns a limiter on it (its loops
// not running).
func benchOriginService(b *testing.B, opts ...Option) (*Service, *testserver.Redis) {
	r := testserver.StartRedis(b)
	ropts, err := RedisOptions(r.URL())
	if err != nil {
		b.Fatal(err)
	}
	client := redis.NewClient(ropts)
	b.Cleanup(func() { client.Close() })
	s, err := New("bench", append(opts, WithOrigin(NewRedisOrigin(client)))...)
	if err != nil {
		b.Fatal(err)
	}
	return s, r
}

func benchWithOrigin(b *testing.B, parallel bool) {
	s, r := benchOriginService(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	rq := warmRequest
	s.Limit(context.Background(), rq) // hydrate
	before := redisCalls(b, r)
	b.ReportAllocs()
	b.ResetTimer()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s.Limit(context.Background(), rq)
			}
		})
	} else {
		for i := 0; i < b.N; i++ {
			s.Limit(context.Background(), rq)
		}
	}
	b.StopTimer()
	time.Sleep(3 * replayInterval) // let the last replay land
	b.ReportMetric(float64(redisCalls(b, r)-before)/float64(b.N), "redis-cmds/accepted")
}

// redisCalls returns how many EVAL and MGET commands the server executed.
func redisCalls(b *testing.B, r *testserver.Redis) int64 {
	info, err := r.Do("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_eval:") && !strings.HasPrefix(line, "cmdstat_mget:") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		total += n
	}
	return total
}

// BenchmarkLimitAfterIdle is the price of maxCopyAge: every request finds
// its key idle for longer than maxCopyAge and reads Redis before deciding
// (one MGET round trip on loopback). Keys with a request at least every
// freshnessInterval never pay it; BenchmarkLimitWarmWithOrigin is their cost.
func BenchmarkLimitAfterIdle(b *testing.B) {
	clock := newFakeClock(600_000)
	s, _ := benchOriginService(b, WithClock(clock))
	rq := warmRequest
	rq.Duration = 30 * 24 * time.Hour
	s.Limit(context.Background(), rq) // hydrate
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clock.Advance(maxCopyAge)
		s.Limit(context.Background(), rq)
	}
	b.StopTimer()
	b.ReportMetric(testutil.ToFloat64(s.metrics.originOps.WithLabelValues(opAged, resultOK))/float64(b.N), "reads/op")
}

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
	benchWithOrigin(b, false, false)
}

func BenchmarkLimitWarmWithOriginParallel(b *testing.B) {
	benchWithOrigin(b, true, false)
}

// BenchmarkLimitWarmWithCluster is BenchmarkLimitWarmWithOrigin on a Redis
// Cluster of three masters.
func BenchmarkLimitWarmWithCluster(b *testing.B) {
	benchWithOrigin(b, false, true)
}

func BenchmarkLimitWarmWithClusterParallel(b *testing.B) {
	benchWithOrigin(b, true, true)
}

// benchRedis is the Redis a benchmark runs on: one server, or every master
// of a cluster.
type benchRedis []*testserver.Redis

// benchOriginService starts a Redis, or a Redis Cluster of three masters,
// and returns a limiter on it (its loops not running).
func benchOriginService(b *testing.B, cluster bool, opts ...Option) (*Service, benchRedis) {
	var client redis.UniversalClient
	var servers benchRedis
	if cluster {
		c := testserver.StartRedisCluster(b, 3)
		client, servers = redisClusterClient(b, c), c.Masters
	} else {
		r := testserver.StartRedis(b)
		client, servers = redisClient(b, r), benchRedis{r}
	}
	s, err := New("bench", append(opts, WithOrigin(NewRedisOrigin(client)))...)
	if err != nil {
		b.Fatal(err)
	}
	return s, servers
}

func benchWithOrigin(b *testing.B, parallel, cluster bool) {
	s, r := benchOriginService(b, cluster)
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

// redisCalls returns how many EVAL and MGET commands the servers executed.
func redisCalls(b *testing.B, servers benchRedis) int64 {
	var total int64
	for _, r := range servers {
		info, err := r.Do("INFO", "commandstats")
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if !strings.HasPrefix(line, "cmdstat_eval:") && !strings.HasPrefix(line, "cmdstat_mget:") {
				continue
			}
			_, rest, _ := strings.Cut(line, "calls=")
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			total += n
		}
	}
	return total
}

// BenchmarkLimitAfterIdle is the price of maxCopyAge: every request finds
// its key idle for longer than maxCopyAge and reads Redis before deciding
// (one MGET round trip on loopback). Keys with a request at least every
// freshnessInterval never pay it; BenchmarkLimitWarmWithOrigin is their cost.
func BenchmarkLimitAfterIdle(b *testing.B) {
	benchAfterIdle(b, false)
}

// BenchmarkLimitAfterIdleCluster is BenchmarkLimitAfterIdle on a Redis
// Cluster of three masters: the read goes to the one master of the key's
// slot.
func BenchmarkLimitAfterIdleCluster(b *testing.B) {
	benchAfterIdle(b, true)
}

func benchAfterIdle(b *testing.B, cluster bool) {
	clock := newFakeClock(600_000)
	s, _ := benchOriginService(b, cluster, WithClock(clock))
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

// BenchmarkLoad100Cells reads 100 cells of 50 keys (the two cells of each
// window), as a MultiLimit or a batch of cold keys does: one MGET on one
// server; on a cluster of three masters, one MGET per slot in one pipeline,
// which reaches each master once.
func BenchmarkLoad100Cells(b *testing.B) {
	for _, cluster := range []bool{false, true} {
		name := "redis"
		if cluster {
			name = "cluster"
		}
		b.Run(name, func(b *testing.B) {
			var client redis.UniversalClient
			if cluster {
				client = redisClusterClient(b, testserver.StartRedisCluster(b, 3))
			} else {
				client = redisClient(b, testserver.StartRedis(b))
			}
			o := NewRedisOrigin(client)
			cells := make([]Cell, 0, 100)
			for i := range 50 {
				c := Cell{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i), Duration: time.Minute, Sequence: 1000}
				prev := c
				prev.Sequence--
				cells = append(cells, c, prev)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := o.Load(ctx, cells); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

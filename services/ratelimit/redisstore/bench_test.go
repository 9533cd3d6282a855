package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// warmRequest is the ratelimit package's benchmark request: a limit that
// never denies.
var warmRequest = ratelimit.Request{Workspace: "ws_1234", Namespace: "api.requests", Identifier: "user_42",
	Limit: 1 << 53, Duration: time.Minute, Cost: 1}

// BenchmarkLimitWarmWithRedis is the ratelimit package's LimitWarm with a
// real Redis as the regional store and the replay loop running: the request
// path should cost the same. It also reports the Redis commands the servers
// executed per accepted request (EVAL for replays, MGET for reads).
func BenchmarkLimitWarmWithRedis(b *testing.B) { benchWarm(b, false, false) }

func BenchmarkLimitWarmWithRedisParallel(b *testing.B) { benchWarm(b, true, false) }

// BenchmarkLimitWarmWithCluster is BenchmarkLimitWarmWithRedis on a Redis
// Cluster of three masters.
func BenchmarkLimitWarmWithCluster(b *testing.B) { benchWarm(b, false, true) }

func BenchmarkLimitWarmWithClusterParallel(b *testing.B) { benchWarm(b, true, true) }

// benchBackend starts one Redis, or a cluster of three masters, and returns
// a client and the servers.
func benchBackend(b *testing.B, cluster bool) (redis.UniversalClient, []*testserver.Redis) {
	if cluster {
		c := testserver.StartRedisCluster(b, 3)
		return clusterClient(b, c), c.Masters
	}
	r := testserver.StartRedis(b)
	return client(b, r), []*testserver.Redis{r}
}

func benchWarm(b *testing.B, parallel, cluster bool) {
	c, servers := benchBackend(b, cluster)
	p := startProcess(b, c)
	rq := warmRequest
	p.Limit(context.Background(), rq) // hydrate
	before := commands(b, servers)
	b.ReportAllocs()
	b.ResetTimer()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p.Limit(context.Background(), rq)
			}
		})
	} else {
		for b.Loop() {
			p.Limit(context.Background(), rq)
		}
	}
	b.StopTimer()
	time.Sleep(50 * time.Millisecond) // let the last replay land
	b.ReportMetric(float64(commands(b, servers)-before)/float64(b.N), "redis-cmds/accepted")
}

// commands returns how many EVAL and MGET commands the servers executed.
func commands(b *testing.B, servers []*testserver.Redis) int64 {
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

// manualClock is a clock the benchmark moves.
type manualClock struct{ ms atomic.Int64 }

func (c *manualClock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }

// BenchmarkLimitAfterIdle is the price of the copy-age bound: every request
// finds its key idle for longer than a second and reads Redis before
// deciding (one MGET round trip on loopback). Keys with a request at least
// every 500 ms never pay it; BenchmarkLimitWarmWithRedis is their cost.
func BenchmarkLimitAfterIdle(b *testing.B) { benchAfterIdle(b, false) }

// BenchmarkLimitAfterIdleCluster is BenchmarkLimitAfterIdle on a Redis
// Cluster of three masters: the read goes to the master of the key's slot.
func BenchmarkLimitAfterIdleCluster(b *testing.B) { benchAfterIdle(b, true) }

func benchAfterIdle(b *testing.B, cluster bool) {
	c, _ := benchBackend(b, cluster)
	clock := &manualClock{}
	clock.ms.Store(600_000)
	reg := prometheus.NewRegistry()
	s, err := ratelimit.New("bench", ratelimit.WithRegionalStore(newStore(b, c, WithRegisterer(reg))), ratelimit.WithClock(clock), ratelimit.WithRegisterer(reg))
	if err != nil {
		b.Fatal(err)
	}
	p := &process{Service: s, reg: reg}
	rq := warmRequest
	rq.Duration = ratelimit.MaxDuration
	p.Limit(context.Background(), rq) // hydrate
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clock.ms.Add(time.Second.Milliseconds())
		p.Limit(context.Background(), rq)
	}
	b.StopTimer()
	b.ReportMetric(p.metric(b, "unkey_ratelimit_origin_operations_total", "op", "aged", "result", "ok")/float64(b.N), "reads/op")
}

// BenchmarkAcquireReleaseWithRedis takes a slot of a concurrency limit in
// Redis (one script, a round trip: slots are never decided from memory
// while Redis answers) and frees it (the releases' total and the pool's
// read in one pipeline, a round trip too), on one warm key: beside BenchmarkLimitWarmWithRedis. The
// Redis syncs its append-only file once a second: at every write, as the
// tests' Redis does, the pair measures two fsyncs.
func BenchmarkAcquireReleaseWithRedis(b *testing.B) { benchAcquireRelease(b, false) }

// BenchmarkAcquireReleaseAnsweredWithRedis is BenchmarkAcquireReleaseWithRedis
// with what a release answers its caller, the slots held after it, read
// with the release in one round trip (before issue 57, a second one: a
// check of the pool, InFlight, which this benchmark then called).
func BenchmarkAcquireReleaseAnsweredWithRedis(b *testing.B) { benchAcquireRelease(b, true) }

// benchAcquireRelease takes a slot and frees it through Redis, b.N
// times; answered checks what each release answers.
func benchAcquireRelease(b *testing.B, answered bool) {
	p := startProcess(b, client(b, testserver.StartRedisEverySec(b)))
	ctx := context.Background()
	a := ratelimit.Acquisition{Workspace: "ws", Namespace: "bench", Identifier: "user_1", Limit: 1 << 40, Lease: time.Minute, Cost: 1}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := p.Acquire(ctx, a)
		if err != nil || !resp.Success {
			b.Fatal(resp, err)
		}
		ret, err := p.Release(ctx, ratelimit.Slot{Workspace: a.Workspace, Namespace: a.Namespace, Identifier: a.Identifier,
			Limit: a.Limit, Lease: a.Lease, Sequence: ratelimit.LeaseCell(resp, a.Lease), Cost: 1})
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

package analytics_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/analytics/memstore"
	"github.com/unkeyed/ratelimit/services/analytics/mysqlstore"
)

// BenchmarkRecord is what a decision pays on the request path: a send on
// the recorder's queue (drained meanwhile by Run).
func BenchmarkRecord(b *testing.B) {
	r, err := analytics.NewRecorder(memstore.New(1_000_000, time.Now), slog.New(slog.DiscardHandler),
		prometheus.NewRegistry(), analytics.WithFlushInterval(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprint("user_", i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.Record("ws", "api", ids[i&1023], i&7 != 0)
			i++
		}
	})
	b.StopTimer()
	cancel()
	<-done
}

// countingStore counts what a flush writes, and how many statements the
// MySQL store would send for it.
type countingStore struct {
	analytics.Store
	buckets, top int
}

func (c *countingStore) Add(ctx context.Context, batch string, buckets []analytics.Bucket, top []analytics.Entry) error {
	c.buckets += len(buckets)
	c.top += len(top)
	if c.Store != nil {
		return c.Store.Add(ctx, batch, buckets, top)
	}
	return nil
}

// fleetFlush is one process's flush interval at the design's fleet: 33
// processes in 10 regions deciding for 24,000 active windows (identifiers)
// in 500 namespaces of 50 workspaces, Zipf-distributed, at rate decisions a
// second for the fleet, a tenth of them denied; the process sees a 33rd of
// them in a 10 s interval.
func fleetFlush(b *testing.B, store analytics.Store, rate int) (rows int, heapMB float64, took time.Duration) {
	counting := &countingStore{Store: store}
	r, err := analytics.NewRecorder(counting, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
		analytics.WithFlushInterval(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	z := rand.NewZipf(rng, 1.1, 1, 23_999)
	decisions := rate * 10 / 33
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	var peak uint64
	for i := range decisions {
		id := z.Uint64()
		ns := id % 500
		r.Record(fmt.Sprint("ws_", ns%50), fmt.Sprint("ns_", ns), fmt.Sprint("user_", id), rng.IntN(10) != 0)
		if i%200_000 == 0 {
			time.Sleep(time.Millisecond)
			runtime.ReadMemStats(&after)
			peak = max(peak, after.HeapAlloc-min(after.HeapAlloc, before.HeapAlloc))
		}
	}
	time.Sleep(50 * time.Millisecond)
	runtime.ReadMemStats(&after)
	peak = max(peak, after.HeapAlloc-min(after.HeapAlloc, before.HeapAlloc))
	start := time.Now()
	cancel() // the final flush
	<-done
	return counting.buckets + counting.top, float64(peak) / (1 << 20), time.Since(start)
}

// BenchmarkFleetFlush reports, for one process of the design's fleet at a
// million decisions a second, the rows one flush writes and the heap its
// tallies hold; with MariaDB (ANALYTICS_MARIADB=1) also how long the flush
// takes there.
func BenchmarkFleetFlush(b *testing.B) {
	var store analytics.Store
	if testing.Short() || b.N > 1 {
		b.Skip("one iteration is the measurement: -benchtime 1x")
	}
	name := "memory"
	if os.Getenv("ANALYTICS_MARIADB") != "" {
		_, sqlDB := dbtest.Start(b)
		store, name = mysqlstore.New(sqlDB, time.Now), "mariadb"
	}
	rows, heap, took := fleetFlush(b, store, 1_000_000)
	b.ReportMetric(float64(rows), "rows/flush")
	b.ReportMetric(heap, "heap-MB")
	b.ReportMetric(took.Seconds()*1000, "flush-ms("+name+")")
}

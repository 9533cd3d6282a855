package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// discardStore is a store.Global that keeps nothing, to time the flush walk
// alone.
type discardStore struct{ published int }

func (d *discardStore) Publish(_ context.Context, _ string, counts []store.CellCount) (int, error) {
	d.published += len(counts)
	return len(counts), nil
}

func (d *discardStore) Sync(context.Context, string, time.Time, time.Time) ([]store.GlobalCount, time.Time, error) {
	return nil, time.Time{}, nil
}

// BenchmarkFlushWalk240k walks 240,000 windows (ten times the load the design was sized for), 10 %
// of them above the floor, collecting and sorting what to
// publish, with a store that discards it.
func BenchmarkFlushWalk240k(b *testing.B) {
	clock := newFakeClock(600_000)
	mem := &discardStore{}
	s, err := New("us", WithClock(clock), WithGlobalStore(mem))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 240_000; i++ {
		cost := int64(1)
		if i%10 == 0 {
			cost = 60 // above the floor of 50
		}
		s.Limit(ctx, Request{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i), Limit: 100, Duration: time.Minute, Cost: cost})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.global.ForgetPublished() // every hot cell changed
		s.global.Flush(ctx, true)
	}
	b.StopTimer()
	b.ReportMetric(float64(mem.published)/float64(b.N), "rows/flush")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/flush")
}

// rowsStore is a store.Global whose every sync returns the same rows, to time
// importing them alone.
type rowsStore struct{ rows []store.GlobalCount }

func (r *rowsStore) Publish(_ context.Context, _ string, counts []store.CellCount) (int, error) {
	return len(counts), nil
}

func (r *rowsStore) Sync(context.Context, string, time.Time, time.Time) ([]store.GlobalCount, time.Time, error) {
	return r.rows, time.Time{}, nil
}

// BenchmarkSyncApply45k imports 45,000 rows from other regions (ten times
// the load the design was sized for), each at the floor, into
// the windows of a process that holds none of them yet: the limiter's share
// of a sync that found every cell changed. Package mysqlstore times the
// database's share.
func BenchmarkSyncApply45k(b *testing.B) {
	seq := int64(29_000_000)
	mem := &rowsStore{rows: make([]store.GlobalCount, 45_000)}
	for i := range mem.rows {
		mem.rows[i] = store.GlobalCount{Key: store.CellKey{Workspace: "ws", Namespace: "api", Identifier: "user_" + strconv.Itoa(i),
			Duration: time.Minute, Sequence: seq}, Others: 50, OthersLimit: 100}
	}
	s, err := New("us", WithGlobalStore(mem), WithClock(newFakeClock(seq*60_000)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		s.global.Sync(ctx)
	}
	b.StopTimer()
	if got := s.ActiveWindows(); got != 45_000 {
		b.Fatalf("%d windows after sync, want 45,000", got)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/sync")
}

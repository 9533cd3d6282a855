package overrides

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/services/overrides/mysqlstore"
)

// The benchmarks of this file run on a real MariaDB the benchmark starts:
// the start-up load of a process (how long until it can take traffic) and
// SetOverride with many overrides held. go test -run '^$' -bench Override
// -benchtime 1x ./services/overrides (the tables take a while to fill).

// benchLoad fills the table with n overrides named by name, then times a
// new process's Load, and reports the heap it holds afterwards.
func benchLoad(b *testing.B, n int, name func(i int) (string, string, string)) {
	_, sqlDB := dbtest.Start(b)
	insertOverrides(b, sqlDB, n, name)
	var took time.Duration
	var heap uint64
	for b.Loop() {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		s := newRegistry(b, WithStore(mysqlstore.New(sqlDB)))
		start := time.Now()
		if err := s.Load(context.Background()); err != nil {
			b.Fatal(err)
		}
		took = time.Since(start)
		if got := s.idx.live.Load(); got != int64(n) {
			b.Fatalf("loaded %d overrides, want %d", got, n)
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - before.HeapAlloc
		runtime.KeepAlive(s)
	}
	b.ReportMetric(took.Seconds(), "s/load")
	b.ReportMetric(float64(heap)/float64(n), "heap-B/override")
}

// BenchmarkOverrideLoad1MAcrossWorkspaces: 1,000,000 exact overrides, 1,000
// workspaces of 1,000 (10 namespaces each).
func BenchmarkOverrideLoad1MAcrossWorkspaces(b *testing.B) {
	benchLoad(b, 1_000_000, func(i int) (string, string, string) {
		return fmt.Sprint("ws_", i/1000), fmt.Sprint("ns_", i%10), fmt.Sprint("user_", i)
	})
}

// BenchmarkOverrideLoad100kOneNamespace: 100,000 exact overrides in one
// namespace.
func BenchmarkOverrideLoad100kOneNamespace(b *testing.B) {
	benchLoad(b, 100_000, func(i int) (string, string, string) { return "ws", "ns", fmt.Sprint("user_", i) })
}

// BenchmarkOverrideLoad1kPatternsOneNamespace: 1,000 patterns in one
// namespace, sorted once per page of the load.
func BenchmarkOverrideLoad1kPatternsOneNamespace(b *testing.B) {
	benchLoad(b, 1000, func(i int) (string, string, string) { return "ws", "ns", fmt.Sprint("user_", i, "_*") })
}

// benchSet times SetOverride of new identifiers in a namespace already
// holding held overrides, on the process that loaded them, and reports the
// median and the 99th percentile.
func benchSet(b *testing.B, held int, pattern bool) {
	_, sqlDB := dbtest.Start(b)
	suffix := ""
	if pattern {
		suffix = "*"
	}
	insertOverrides(b, sqlDB, held, func(i int) (string, string, string) { return "ws", "ns", fmt.Sprint("user_", i, suffix) })
	s := newRegistry(b, WithStore(mysqlstore.New(sqlDB)), WithMaxPerWorkspace(int64(held)+1_000_000))
	ctx := context.Background()
	if err := s.Load(ctx); err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	i := 0
	for b.Loop() {
		start := time.Now()
		if _, err := s.Set(ctx, Override{Workspace: "ws", Namespace: "ns", Identifier: fmt.Sprint("new_", i, suffix),
			Limit: 5, Duration: time.Minute}); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
		i++
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "ms-p99")
}

// BenchmarkOverrideSetAt100k: SetOverride with 100,000 exact overrides in
// the namespace.
func BenchmarkOverrideSetAt100k(b *testing.B) { benchSet(b, 100_000, false) }

// BenchmarkOverrideSetPatternAt1k: SetOverride of a pattern with 1,000
// patterns in the namespace.
func BenchmarkOverrideSetPatternAt1k(b *testing.B) { benchSet(b, 1000, true) }

// BenchmarkOverrideLookup: a decision's lookup of an identifier no
// override matches, in a namespace with 100,000 exact overrides and
// patterns: none, 1,000 anchored ones ("user_<i>_*", "*_<i>.example"), or
// the 32 floating ones allowed as well.
func BenchmarkOverrideLookup(b *testing.B) {
	for _, shape := range []struct {
		name               string
		anchored, floating int
	}{{"no patterns", 0, 0}, {"1000 patterns", 1000, 0}, {"1000 patterns with 32 floating", 1000 - MaxFloatingPatterns, MaxFloatingPatterns}} {
		b.Run(shape.name, func(b *testing.B) {
			s := newRegistry(b)
			put := func(id string) {
				c := Change{Override: Override{Workspace: "ws", Namespace: "ns", Identifier: id, Limit: 1}, Revision: 1}
				s.idx.apply(&c, 0, false)
			}
			for i := range 100_000 {
				put(fmt.Sprint("user_", i))
			}
			for i := range shape.anchored {
				if i%2 == 0 {
					put(fmt.Sprint("user_", i, "_*"))
				} else {
					put(fmt.Sprint("*_", i, ".example"))
				}
			}
			for i := range shape.floating {
				put(fmt.Sprint("*bot", i, "*"))
			}
			for b.Loop() {
				if _, ok := s.Lookup("ws", "ns", "customer_4242_eu-west"); ok {
					b.Fatal("matched")
				}
			}
		})
	}
}

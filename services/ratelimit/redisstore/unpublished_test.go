package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

func TestParseKeyIsKeysInverse(t *testing.T) {
	for _, k := range []store.CellKey{
		{Workspace: "ws", Namespace: "ns", Identifier: "id", Duration: time.Minute, Sequence: 29_999_999},
		{Workspace: "w:{1}", Namespace: "}{", Identifier: "a:b}:c", Duration: 366 * 24 * time.Hour, Sequence: 1},
		{Workspace: "é", Namespace: "", Identifier: "12:x", Duration: time.Second, Sequence: 0},
		{Workspace: "ws", Namespace: "ns", Identifier: "id:r", Duration: time.Minute, Sequence: 7, Refunds: true},
		{Workspace: "ws", Namespace: "ns", Identifier: "id:r", Duration: time.Minute, Sequence: 7},
		{Workspace: "ws", Namespace: "ns", Identifier: "pool}:", Duration: time.Duration(store.PoolCode(3, 212_500_001)) * time.Millisecond, Sequence: 212_500_001},
		{Workspace: "ws", Namespace: "", Identifier: "p", Duration: time.Duration(store.PoolCode(0, 1_700_000_001)) * time.Millisecond, Sequence: 1_700_000_001, Refunds: true},
	} {
		got, err := parseKey(Key(&k))
		if err != nil || got != k {
			t.Errorf("parseKey(Key(%+v)) = %+v, %v", k, got, err)
		}
	}
	for _, bad := range []string{"", "ratelimit:v1:x", "ratelimit:v2:{9:ab", "ratelimit:v2:{2:ws2:ns2:id:60000}", "ratelimit:v2:{2:ws2:ns2:id:x}:1"} {
		if _, err := parseKey(bad); err == nil {
			t.Errorf("parseKey(%q) took it", bad)
		}
	}
}

// TestIndexOfMarkedCells: an increment with a mark indexes its cell; Idle
// returns the cells last marked before a time with the count Redis holds;
// Forget drops them, but one marked again since Idle read it. On one
// server and on a cluster, where the index spreads over shards.
func TestIndexOfMarkedCells(t *testing.T) {
	for _, backend := range []string{"redis", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			c := startBackend(t, backend)
			s := newStore(t, c)
			ctx := context.Background()
			cell := func(id string) store.CellKey {
				return store.CellKey{Workspace: "ws", Namespace: "ns", Identifier: id, Duration: time.Hour, Sequence: time.Now().UnixMilli() / 3_600_000}
			}
			var incs []store.Increment
			for _, id := range []string{"a", "b", "c", "d", "e"} {
				incs = append(incs, store.Increment{Key: cell(id), Delta: 7, TTL: time.Hour, Mark: 100})
			}
			incs = append(incs, store.Increment{Key: cell("unmarked"), Delta: 3, TTL: time.Hour})
			if _, err := s.Increment(ctx, incs); err != nil {
				t.Fatal(err)
			}
			if idle, err := s.Idle(ctx, time.Now().Add(-time.Minute), 100); err != nil || len(idle) != 0 {
				t.Fatalf("cells idle for a minute: %v, %v; want none", idle, err)
			}
			time.Sleep(5 * time.Millisecond)
			idle, err := s.Idle(ctx, time.Now(), 100)
			if err != nil || len(idle) != 5 {
				t.Fatalf("idle cells: %+v, %v; want the 5 marked", idle, err)
			}
			for _, ic := range idle {
				if ic.Count != 7 || ic.Limit != 100 || ic.Key.Namespace != "ns" {
					t.Fatalf("idle cell %+v, want a count of 7 and a limit of 100", ic)
				}
			}
			// One is marked again before the others are forgotten.
			if _, err := s.Increment(ctx, []store.Increment{{Key: cell("a"), Delta: 1, TTL: time.Hour, Mark: 100}}); err != nil {
				t.Fatal(err)
			}
			if err := s.Forget(ctx, idle); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
			idle, err = s.Idle(ctx, time.Now(), 100)
			if err != nil || len(idle) != 1 || idle[0].Key.Identifier != "a" || idle[0].Count != 8 {
				t.Fatalf("after Forget: %+v, %v; want only a, marked again, at 8", idle, err)
			}
		})
	}
}

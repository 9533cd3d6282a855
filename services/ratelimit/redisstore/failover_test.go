package redisstore

import (
	"context"

	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// TestFailoverUnderSteadyTraffic: two processes, which made no call before,
// call on a key of one master (and on fresh keys of every master) about ten
// times a second from the moment the master is SIGKILLed. Once a replica
// has taken over, both processes' increments reach it within a few
// seconds, every time: with every master a seed, and with the victim the
// only seed, where the client must have read the cluster's map at start
// (Warm, as the API does before it serves) to know any other node.
func TestFailoverUnderSteadyTraffic(t *testing.T) {
	for _, seeds := range []string{"every master", "the victim only"} {
		t.Run(seeds, func(t *testing.T) { testFailoverUnderSteadyTraffic(t, seeds == "the victim only") })
	}
}

func testFailoverUnderSteadyTraffic(t *testing.T, victimOnly bool) {
	cluster := testserver.StartRedisClusterWithReplicas(t, 3, 1)
	victim := cluster.Masters[1]
	newClient := func() redis.UniversalClient {
		if !victimOnly {
			return clusterClient(t, cluster)
		}
		opts, err := ClusterOptions("redis+cluster://" + victim.Addr)
		if err != nil {
			t.Fatal(err)
		}
		cc := redis.NewClusterClient(opts)
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	ca, cb, check := newClient(), newClient(), clusterClient(t, cluster)
	for _, c := range []redis.UniversalClient{ca, cb} {
		if err := Warm(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	a, b := startProcess(t, ca), startProcess(t, cb)
	rq := request("", 1<<40, 1)
	cellOf := func() store.CellKey {
		return store.CellKey{Workspace: rq.Workspace, Namespace: rq.Namespace, Identifier: rq.Identifier, Duration: rq.Duration,
			Sequence: time.Now().UnixMilli() / rq.Duration.Milliseconds()}
	}
	var slotOf int
	for i := 0; ; i++ {
		rq.Identifier = "steady_" + strconv.Itoa(i)
		k := cellOf()
		if slotOf = int(slot(Key(&k))); cluster.SlotOwner(slotOf) == victim.Addr {
			break
		}
	}
	checker := newStore(t, check)
	held := func() int64 {
		counts, err := checker.Load(context.Background(), []store.CellKey{cellOf()})
		if err != nil {
			return -1
		}
		return counts[0]
	}
	admitted := int64(0)
	killed := time.Now()
	victim.Kill()
	var ok time.Time
	deadline := time.Now().Add(poll.Scaled(40 * time.Second))
	fresh := 0
	for time.Now().Before(deadline) {
		for _, p := range []*process{a, b} {
			if decide(t, p.Service, rq).Success {
				admitted++
			}
			// And a key the process has not seen, on any master: a read
			// of the region's count on the request path.
			fresh++
			other := request("fresh_"+strconv.Itoa(fresh), 1<<40, 1)
			decide(t, p.Service, other)
		}
		time.Sleep(100 * time.Millisecond)
		if ok.IsZero() {
			if owner := cluster.SlotOwner(slotOf); owner != "" && owner != victim.Addr && cluster.Ok() {
				ok = time.Now()
			}
			continue
		}
		if held() >= admitted-2 { // the last calls' replays may be in flight
			took := time.Since(ok)
			t.Logf("failover: cluster ok %v after the kill; both processes' increments on the new master %v after that",
				ok.Sub(killed).Round(time.Millisecond), took.Round(time.Millisecond))
			if took > 5*time.Second {
				t.Fatalf("the increments took %v to reach the new master, want a few seconds", took)
			}
			return
		}
	}
	t.Fatalf("40 s after the kill (cluster ok after %v), the new master holds %d of %d admitted", ok.Sub(killed), held(), admitted)
}

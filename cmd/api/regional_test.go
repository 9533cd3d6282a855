package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/poll"
	"github.com/unkeyed/ratelimit/internal/testserver"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/ratelimit/redisorigin"
)

// TestTwoProcessesOneRegion runs two real API servers on one Redis: what A
// accepted is reflected in B's decisions for a cell B has not seen, and a
// process restarted mid-window does not admit budget that was spent.
func TestTwoProcessesOneRegion(t *testing.T) {
	r := testserver.StartRedis(t)
	a := startServer(t, "UNKEY_REDIS_URL="+r.URL())
	b := startServer(t, "UNKEY_REDIS_URL="+r.URL())
	body := `{"namespace":"sms.sign_up","identifier":"user_42","limit":10,"duration":2592000000}`
	for i := 0; i < 6; i++ {
		if _, out := a.call(t, "Limit", "", body); out["success"] != true {
			t.Fatalf("A denied request %d: %v", i, out)
		}
	}
	waitForRedis(t, r, "user_42", 6)
	admitted := 0
	for i := 0; i < 10; i++ {
		if _, out := b.call(t, "Limit", "", body); out["success"] == true {
			admitted++
		}
	}
	if admitted != 4 {
		t.Fatalf("B admitted %d after A spent 6 of 10, want 4", admitted)
	}
	// A cell B already holds: B made one request on it, then A spends the
	// rest. Once B's last read is older than the freshness interval (1 s),
	// B's next request starts a background refresh and decides from memory;
	// the refresh lands within a replay tick, and B denies from then on.
	warm := `{"namespace":"sms.sign_up","identifier":"user_7","limit":10,"duration":2592000000}`
	if _, out := b.call(t, "Limit", "", warm); out["success"] != true {
		t.Fatalf("B's first request denied: %v", out)
	}
	for i := 0; i < 9; i++ {
		a.call(t, "Limit", "", warm)
	}
	time.Sleep(time.Second + 50*time.Millisecond)
	b.call(t, "Limit", "", warm) // starts the refresh
	poll.Until(t, 2*time.Second, "B to see what A spent on a cell B already held", func() bool {
		_, out := b.call(t, "Limit", "", warm)
		return out["success"] == false
	})

	// A restarted process reads the spent budget back.
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	waitForRedis(t, r, "user_42", 10)
	restarted := startServer(t, "UNKEY_REDIS_URL="+r.URL())
	if status, out := restarted.call(t, "Limit", "", body); status != http.StatusOK || out["success"] != false {
		t.Fatalf("restarted process: %d %v, want a denial", status, out)
	}
}

// waitForRedis waits until the one key whose name contains part holds want.
func waitForRedis(t *testing.T, r *testserver.Redis, part string, want int) {
	t.Helper()
	poll.Until(t, 5*time.Second, fmt.Sprintf("Redis to hold %d for %q", want, part), func() bool {
		key, err := r.Do("KEYS", "*"+part+"*")
		if err != nil || key == "" || strings.Contains(key, "\n") {
			return false
		}
		v, _ := r.Do("GET", key)
		n, _ := strconv.Atoi(v)
		return n == want
	})
}

// TestRedisClusterMasterKilled runs three API processes of one region on a
// Redis Cluster of three masters and sends them Limit calls on 60 keys from
// eight clients while one master is killed: every call is answered 200 (keys
// whose slots were on the dead master are decided locally, behind the
// origin's breaker), and before and after, what one process spends on a key
// another process decides.
func TestRedisClusterMasterKilled(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	procs := []*testServer{
		startServer(t, "UNKEY_REDIS_URL="+cluster.URL()),
		startServer(t, "UNKEY_REDIS_URL="+cluster.URL()),
		startServer(t, "UNKEY_REDIS_URL="+cluster.URL()),
	}
	shared := func(id string) {
		t.Helper()
		body := `{"namespace":"cluster","identifier":"` + id + `","limit":10,"duration":2592000000,"cost":10}`
		if _, out := procs[0].call(t, "Limit", "", body); out["success"] != true {
			t.Fatalf("first process denied spending the limit of %s: %v", id, out)
		}
		poll.Until(t, 5*time.Second, "the second process to see the first's spending on "+id, func() bool {
			_, out := procs[1].call(t, "Limit", "", strings.Replace(body, `"cost":10`, `"cost":1`, 1))
			return out["success"] == false
		})
	}
	shared("before")

	var sent, failed atomic.Int64
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for c := range 8 {
		clients.Go(func() {
			client := &http.Client{Timeout: 5 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := procs[(c+i)%len(procs)]
				body := `{"namespace":"cluster","identifier":"k` + strconv.Itoa((c*7+i)%60) + `","limit":1000000,"duration":2592000000}`
				resp, err := client.Post(p.url+"/ratelimit.v1.RatelimitService/Limit", "application/json", strings.NewReader(body))
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	time.Sleep(time.Second)
	cluster.Masters[1].Kill()
	time.Sleep(2 * time.Second)
	close(stop)
	clients.Wait()
	t.Logf("%d calls, %d failed, one master of three killed after 1 s of 3", sent.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Fatalf("%d of %d calls failed while a master was killed", failed.Load(), sent.Load())
	}
	// Keys on the surviving masters still converge across processes; try
	// identifiers until one lands there (two of three do).
	for i := range 20 {
		id := "after" + strconv.Itoa(i)
		slot, _ := cluster.Masters[0].Do("CLUSTER", "KEYSLOT", redisKeyOf("cluster", id))
		if owner := slotOwner(t, cluster, slot); owner == cluster.Masters[1].Addr {
			continue
		}
		shared(id)
		return
	}
	t.Fatal("no identifier of 20 landed on a surviving master")
}

// redisKeyOf returns a Redis key of an open server's cell of namespace and
// identifier in 30-day windows; the sequence is left out of the hash tag, so
// any will do for its slot.
func redisKeyOf(namespace, identifier string) string {
	return redisorigin.Key(&ratelimit.Cell{Workspace: openWorkspace, Namespace: namespace, Identifier: identifier,
		Duration: 2592000000 * time.Millisecond})
}

// slotOwner returns the address of the master that serves slot, as
// CLUSTER NODES on the first master tells.
func slotOwner(t *testing.T, c *testserver.RedisCluster, slot string) string {
	t.Helper()
	n, err := strconv.Atoi(slot)
	if err != nil {
		t.Fatalf("slot %q: %v", slot, err)
	}
	nodes, err := c.Masters[0].Do("CLUSTER", "NODES")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			l, _ := strconv.Atoi(lo)
			h, _ := strconv.Atoi(hi)
			if l <= n && n <= h {
				return addr
			}
		}
	}
	t.Fatalf("no master serves slot %d", n)
	return ""
}

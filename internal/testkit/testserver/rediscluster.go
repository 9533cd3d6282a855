package testserver

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
)

// RedisCluster is a private Redis Cluster started by the test and stopped
// when it ends. Each node keeps its data in an append-only file, like
// [Redis]. Without replicas a killed master's slots are unavailable until it
// starts again, while the others keep serving theirs
// (cluster-require-full-coverage is off); with them, a replica takes over a
// killed master's slots within a few seconds (cluster-node-timeout is 1 s).
type RedisCluster struct {
	// Masters are the nodes that served the slots when the cluster was
	// created, Replicas the others (a failover swaps roles).
	Masters, Replicas []*Redis
	cli               string
}

// StartRedisCluster starts masters redis-servers in cluster mode on free
// ports and joins them with redis-cli --cluster create, which spreads the
// 16,384 slots evenly over them. It returns once every node reports the
// cluster ok.
func StartRedisCluster(t testing.TB, masters int) *RedisCluster {
	t.Helper()
	return startRedisCluster(t, masters, 0)
}

// StartRedisClusterWithReplicas is StartRedisCluster with replicas
// replicas of each master; it returns once every replica has synced.
func StartRedisClusterWithReplicas(t testing.TB, masters, replicas int) *RedisCluster {
	t.Helper()
	return startRedisCluster(t, masters, replicas)
}

func startRedisCluster(t testing.TB, masters, replicas int) *RedisCluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli is not installed (make test installs redis-server, which ships it): %v", err)
	}
	c := &RedisCluster{cli: cli}
	var all []*Redis
	for range masters * (1 + replicas) {
		all = append(all, startRedis(t, func(dir string) []string {
			return []string{
				"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				// The bus port is set rather than port+10000, which may be
				// taken or past 65535.
				"--cluster-port", strconv.Itoa(FreePort(t)),
				"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no",
				// A replica takes over however long it was cut off.
				"--cluster-replica-validity-factor", "0",
			}
		}))
	}
	args := []string{"--cluster", "create"}
	for _, m := range all {
		args = append(args, m.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range all {
		poll.Until(t, 30*time.Second, "redis cluster node "+n.Addr+" to report the cluster ok", func() bool {
			info, _ := n.Do("CLUSTER", "INFO")
			return strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(all)))
		})
	}
	for _, n := range all {
		role, _ := n.Do("ROLE")
		if strings.HasPrefix(role, "master") {
			c.Masters = append(c.Masters, n)
			continue
		}
		c.Replicas = append(c.Replicas, n)
		poll.Until(t, 30*time.Second, "replica "+n.Addr+" to sync with its master", func() bool {
			info, _ := n.Do("INFO", "replication")
			return strings.Contains(info, "master_link_status:up")
		})
	}
	return c
}

// URL returns the cluster's redis+cluster:// URL, every master a seed.
func (c *RedisCluster) URL() string {
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

// Nodes returns every node, masters first.
func (c *RedisCluster) Nodes() []*Redis { return append(slices.Clone(c.Masters), c.Replicas...) }

// ID returns n's cluster node id.
func (n *Redis) ID() (string, error) { return n.Do("CLUSTER", "MYID") }

// SlotOwner returns the address of the master that serves slot, as the
// first node that answers CLUSTER NODES tells, or "" if none does. A master
// the others consider failed still owns its slots until a replica takes
// them over, so it may be the answer.
func (c *RedisCluster) SlotOwner(slot int) string {
	for _, n := range c.Nodes() {
		out, err := n.Do("CLUSTER", "NODES")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "master") {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			for _, r := range f[8:] {
				lo, hi, ok := strings.Cut(r, "-")
				if !ok {
					hi = lo
				}
				l, err1 := strconv.Atoi(lo)
				h, err2 := strconv.Atoi(hi)
				if err1 == nil && err2 == nil && l <= slot && slot <= h {
					return addr
				}
			}
		}
		return ""
	}
	return ""
}

// Ok reports whether every running node reports the cluster ok.
func (c *RedisCluster) Ok() bool {
	for _, n := range c.Nodes() {
		if !n.proc.running() {
			continue
		}
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
	}
	return true
}

// Reshard moves slots slots from the master from to the master to with
// redis-cli --cluster reshard, key by key (MIGRATE), as an operator would:
// clients meanwhile get ASK and MOVED redirects.
func (c *RedisCluster) Reshard(t testing.TB, from, to *Redis, slots int) {
	t.Helper()
	fromID, err := from.ID()
	if err != nil {
		t.Fatal(err)
	}
	toID, err := to.ID()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(c.cli, "--cluster", "reshard", from.Addr, "--cluster-from", fromID, "--cluster-to", toID,
		"--cluster-slots", strconv.Itoa(slots), "--cluster-yes", "--cluster-pipeline", "10").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
	}
}

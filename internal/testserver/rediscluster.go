package testserver

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/poll"
)

// RedisCluster is a private Redis Cluster of masters without replicas,
// started by the test and stopped when it ends. Each master keeps its
// slots' data in an append-only file, like [Redis]; a killed master's slots
// are unavailable until it starts again, while the others keep serving
// theirs (cluster-require-full-coverage is off).
type RedisCluster struct {
	Masters []*Redis
}

// StartRedisCluster starts masters redis-servers in cluster mode on free
// ports and joins them with redis-cli --cluster create, which spreads the
// 16,384 slots evenly over them. It returns once every node reports the
// cluster ok.
func StartRedisCluster(t testing.TB, masters int) *RedisCluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli is not installed (make test installs redis-server, which ships it): %v", err)
	}
	c := &RedisCluster{}
	for range masters {
		c.Masters = append(c.Masters, startRedis(t, func(dir string) []string {
			return []string{
				"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				// The bus port is set rather than port+10000, which may be
				// taken or past 65535.
				"--cluster-port", strconv.Itoa(FreePort(t)),
				"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no",
			}
		}))
	}
	args := []string{"--cluster", "create"}
	for _, m := range c.Masters {
		args = append(args, m.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, m := range c.Masters {
		poll.Until(t, 20*time.Second, "redis cluster node "+m.Addr+" to report the cluster ok", func() bool {
			info, _ := m.Do("CLUSTER", "INFO")
			return strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(masters))
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

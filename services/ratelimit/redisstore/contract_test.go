package redisstore

import (
	"testing"

	"github.com/unkeyed/ratelimit/internal/testserver"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// TestContractOneServer runs the regional store's contract suite on one
// real Redis server.
func TestContractOneServer(t *testing.T) {
	c := client(t, testserver.StartRedis(t))
	storetest.TestRegional(t, func(t *testing.T) store.Regional { return newStore(t, c) })
}

// TestContractCluster runs it on a real Redis Cluster of three masters, so
// that the keys of one call span several nodes.
func TestContractCluster(t *testing.T) {
	c := clusterClient(t, testserver.StartRedisCluster(t, 3))
	storetest.TestRegional(t, func(t *testing.T) store.Regional { return newStore(t, c) })
}

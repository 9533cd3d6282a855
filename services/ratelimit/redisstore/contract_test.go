package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
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

// TestContractOverTLS runs the contract suite on a Redis that speaks TLS
// only, through a rediss:// URL whose certificate a private CA signed.
func TestContractOverTLS(t *testing.T) {
	ca := testserver.NewCA(t)
	certFile, keyFile, caFile := ca.ServerFiles(t, t.TempDir())
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	r := testserver.StartRedisTLS(t, certFile, keyFile, caFile, &tls.Config{RootCAs: pool})
	opts, err := Options("rediss://" + r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if opts.TLSConfig == nil {
		t.Fatal("a rediss:// URL gave no TLS configuration")
	}
	opts.TLSConfig.RootCAs = pool // the private CA; a public one needs nothing
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	storetest.TestRegional(t, func(t *testing.T) store.Regional { return newStore(t, c) })
}

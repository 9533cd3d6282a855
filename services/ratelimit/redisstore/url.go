package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// dialAttempts is how often a client tries to connect before a call fails.
// go-redis tries 5 times, 100 ms apart, by default: half a second in which a
// call to a dead node holds up the pipeline it is part of, and with it the
// keys of every healthy node in that pipeline. The node's circuit breaker
// paces the retries instead.
const dialAttempts = 1

// Options parses a redis:// or rediss:// URL into client options tuned
// for a regional store: the caller's context deadline bounds every call (the limiter
// sets store.RequestTimeout on the request path), nothing is retried inside the
// client (the limiter retries replays itself), and a dead server is noticed
// within one store.RequestTimeout (one dial attempt).
func Options(url string) (*redis.Options, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	if err := checkTLS(opts.TLSConfig); err != nil {
		return nil, err
	}
	tune(&opts.ContextTimeoutEnabled, &opts.MaxRetries, &opts.DialerRetries, &opts.DialTimeout, &opts.PoolTimeout)
	return opts, nil
}

// ClusterOptions parses a Redis Cluster URL into cluster client options
// tuned as [Options] tunes a single server's:
//
//	redis+cluster://[user:password@]host:port[,host:port...][?options]
//
// (rediss+cluster:// for TLS). The hosts are seeds: the client learns the
// cluster's other nodes, and who serves which slot, from any of them.
// Options are go-redis's cluster URL options (max_redirects, …). Redirects
// after a failover are followed; nothing else is retried inside the client.
func ClusterOptions(url string) (*redis.ClusterOptions, error) {
	scheme, rest, ok := strings.Cut(url, "+cluster://")
	if !ok || (scheme != "redis" && scheme != "rediss") {
		return nil, fmt.Errorf("want redis+cluster:// or rediss+cluster://, got %q", url)
	}
	userinfo, hosts := "", rest
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		userinfo, hosts = rest[:at+1], rest[at+1:]
	}
	hosts, query, _ := strings.Cut(hosts, "?")
	hosts = strings.TrimSuffix(hosts, "/")
	seeds := strings.Split(hosts, ",")
	params := []string{}
	if query != "" {
		params = append(params, query)
	}
	for _, seed := range seeds[1:] {
		if seed == "" {
			return nil, fmt.Errorf("empty host in %q", url)
		}
		params = append(params, "addr="+seed)
	}
	u := scheme + "://" + userinfo + seeds[0]
	if len(params) > 0 {
		u += "?" + strings.Join(params, "&")
	}
	opts, err := redis.ParseClusterURL(u)
	if err != nil {
		return nil, err
	}
	if err := checkTLS(opts.TLSConfig); err != nil {
		return nil, err
	}
	tune(&opts.ContextTimeoutEnabled, &opts.MaxRetries, &opts.DialerRetries, &opts.DialTimeout, &opts.PoolTimeout)
	return opts, nil
}

// checkTLS refuses a URL whose options turn off the checks of Redis's
// certificate (go-redis's skip_verify): a rediss:// connection always
// verifies it, against the system's roots or UNKEY_REDIS_TLS_CA_FILE.
func checkTLS(c *tls.Config) error {
	if c != nil && c.InsecureSkipVerify {
		return errors.New("skip_verify is not allowed: Redis's certificate is always checked (give its CA in UNKEY_REDIS_TLS_CA_FILE)")
	}
	return nil
}

// tune sets what Options documents on the fields of a client's options,
// which go-redis declares apart for one server and for a cluster: calls
// bounded by their context, no retries inside the client, one dial attempt
// and pool waits within store.RequestTimeout.
func tune(contextTimeout *bool, maxRetries, dialerRetries *int, dialTimeout, poolTimeout *time.Duration) {
	*contextTimeout = true
	*maxRetries = -1
	*dialerRetries = dialAttempts
	*dialTimeout = store.RequestTimeout
	*poolTimeout = store.RequestTimeout
}

// Package redisorigin is the limiter's regional origin on Redis: one
// server, or a Redis Cluster. The processes of a region add what they
// accepted to it and read from it what the others accepted (see
// ratelimit.Origin).
package redisorigin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Origin is a [ratelimit.Origin] on Redis: one server, or a Redis Cluster.
// Each cell is one string key holding its count; both cells of a window share
// a hash tag, so on a cluster they live in one slot.
type Origin struct {
	client  redis.UniversalClient
	cluster bool
}

// New returns an origin on client, a *redis.Client or a
// *redis.ClusterClient. It does not take ownership: closing the client is
// the caller's job.
func New(client redis.UniversalClient) *Origin {
	_, cluster := client.(*redis.ClusterClient)
	return &Origin{client: client, cluster: cluster}
}

// incrementScript adds ARGV[1] to KEYS[1] and sets its expiry to ARGV[2] ms
// in one atomic step: a crash between the two can never leave a key without
// an expiry. It keeps the longer expiry if the key already has one. A key
// that INCRBY cannot add to (its value is not a 64-bit integer, the sum would
// overflow, or it is not a string) is set to ARGV[3], the largest count the
// limiter takes: a corrupt cell fails closed until it expires, and never
// fails the other commands of the pipeline.
var incrementScript = redis.NewScript(`
local ok, n = pcall(redis.call, 'INCRBY', KEYS[1], ARGV[1])
if not ok then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
  return tonumber(ARGV[3])
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return n`)

// clampCount bounds a count read from Redis to [0, ratelimit.MaxStoredCount].
// Redis holds whatever anyone wrote: a negative count must not lend budget,
// and a huge one must not overflow the decision maths.
func clampCount(n int64) int64 { return min(max(n, 0), ratelimit.MaxStoredCount) }

// Load reads every cell in one MGET, or on a cluster, unless every cell is
// in one slot, one MGET per hash slot, sent in one pipeline (which the
// cluster client splits per node and sends to the nodes at once). A value
// that is not a count reads as ratelimit.MaxStoredCount, so a corrupt cell
// denies rather than admits; counts are clamped to [0,
// ratelimit.MaxStoredCount].
func (o *Origin) Load(ctx context.Context, cells []ratelimit.Cell) ([]int64, error) {
	if len(cells) == 0 {
		return nil, nil
	}
	keys := make([]string, len(cells))
	for i := range cells {
		keys[i] = Key(&cells[i])
	}
	counts := make([]int64, len(cells))
	if !o.cluster || sameSlot(keys) {
		// One server, or one slot (one window's cells always are): one
		// MGET, without a pipeline and without grouping.
		vals, err := o.client.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, fmt.Errorf("redis mget %d cells: %w", len(keys), err)
		}
		parseCounts(vals, counts, nil)
		return counts, nil
	}
	bySlot := make(map[uint16][]int)
	for i, k := range keys {
		sl := slot(k)
		bySlot[sl] = append(bySlot[sl], i)
	}
	pipe := o.client.Pipeline()
	type slotGet struct {
		at  []int
		cmd *redis.SliceCmd
	}
	gets := make([]slotGet, 0, len(bySlot))
	for _, at := range bySlot {
		ks := make([]string, len(at))
		for j, i := range at {
			ks[j] = keys[i]
		}
		gets = append(gets, slotGet{at: at, cmd: pipe.MGet(ctx, ks...)})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redis mget %d cells in %d slots: %w", len(keys), len(gets), err)
	}
	for _, g := range gets {
		parseCounts(g.cmd.Val(), counts, g.at)
	}
	return counts, nil
}

// sameSlot reports whether every key is in the slot of the first.
func sameSlot(keys []string) bool {
	first := slot(keys[0])
	for _, k := range keys[1:] {
		if slot(k) != first {
			return false
		}
	}
	return true
}

// parseCounts stores the counts of an MGET reply in counts, the i-th value
// at at[i] (at i if at is nil).
func parseCounts(vals []any, counts []int64, at []int) {
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // nil: the key does not exist
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			n = ratelimit.MaxStoredCount
		}
		if at != nil {
			counts[at[i]] = clampCount(n)
		} else {
			counts[i] = clampCount(n)
		}
	}
}

// Increment sends every increment in one pipeline.
func (o *Origin) Increment(ctx context.Context, incs []ratelimit.Increment) ([]int64, error) {
	pipe := o.client.Pipeline()
	cmds := make([]*redis.Cmd, len(incs))
	for i := range incs {
		ttl := max(incs[i].TTL.Milliseconds(), 1)
		// EVAL, not EVALSHA: a restarted server has lost its script cache,
		// and a pipeline of EVALSHA would then fail without telling which
		// commands ran. The script is a few hundred bytes a replayed cell.
		cmds[i] = incrementScript.Eval(ctx, pipe, []string{Key(&incs[i].Cell)}, incs[i].Delta, ttl, ratelimit.MaxStoredCount)
	}
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	counts := make([]int64, len(incs))
	var firstErr error
	failed := 0
	for i, cmd := range cmds {
		n, err := cmd.Int64()
		if err != nil {
			counts[i] = -1
			failed++
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		counts[i] = clampCount(n)
	}
	if firstErr == nil {
		return counts, nil
	}
	err := fmt.Errorf("redis increment: %d of %d cells failed: %w", failed, len(incs), firstErr)
	var reply redis.Error
	if failed < len(incs) && errors.As(firstErr, &reply) {
		// Redis answered: the trouble is with some keys, not the server.
		return counts, &ratelimit.PartialError{Err: err}
	}
	return counts, err
}

// Key returns the Redis key of a cell: every variable part is prefixed
// by its length, so parts can never run into each other: namespace "a-b" with
// identifier "c" and namespace "a" with identifier "b-c" are different keys.
// Everything but the sequence is the key's hash tag (between the first "{"
// and the first "}" after it, which Redis Cluster hashes instead of the whole
// key): the two cells of a window share their slot whatever the names hold,
// since a "}" in a name ends the tag early but still inside the part both
// cells share. The tag is never empty: it starts with a length.
//
//	ratelimit:v2:{<len>:<workspace><len>:<namespace><len>:<identifier>:<duration ms>}:<sequence>
func Key(c *ratelimit.Cell) string {
	b := make([]byte, 0, 34+len(c.Workspace)+len(c.Namespace)+len(c.Identifier))
	b = append(b, "ratelimit:v2:{"...)
	for _, part := range [...]string{c.Workspace, c.Namespace, c.Identifier} {
		b = strconv.AppendInt(b, int64(len(part)), 10)
		b = append(b, ':')
		b = append(b, part...)
	}
	b = append(b, ':')
	b = strconv.AppendInt(b, c.Duration.Milliseconds(), 10)
	b = append(b, "}:"...)
	b = strconv.AppendInt(b, c.Sequence, 10)
	return string(b)
}

// slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of
// its hash tag, or of the whole key without one, modulo 16384.
func slot(key string) uint16 {
	if start := strings.IndexByte(key, '{'); start >= 0 {
		if end := strings.IndexByte(key[start+1:], '}'); end > 0 {
			key = key[start+1 : start+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// Options parses a redis:// or rediss:// URL into client options tuned
// for an origin: the caller's context deadline bounds every call (the limiter
// sets ratelimit.OriginTimeout on the request path), nothing is retried inside the
// client (the limiter retries replays itself), and a dead server is noticed
// within one ratelimit.OriginTimeout.
func Options(url string) (*redis.Options, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	opts.DialTimeout = ratelimit.OriginTimeout
	opts.PoolTimeout = ratelimit.OriginTimeout
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
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	opts.DialTimeout = ratelimit.OriginTimeout
	opts.PoolTimeout = ratelimit.OriginTimeout
	return opts, nil
}

package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// RedisOrigin is an [Origin] on Redis. Each cell is one string key holding
// its count.
type RedisOrigin struct {
	client redis.UniversalClient
}

// NewRedisOrigin returns an origin on client. It does not take ownership:
// closing the client is the caller's job.
func NewRedisOrigin(client redis.UniversalClient) *RedisOrigin {
	return &RedisOrigin{client: client}
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

// clampCount bounds a count read from Redis to [0, MaxStoredCount]. Redis
// holds whatever anyone wrote: a negative count must not lend budget, and a
// huge one must not overflow the decision maths.
func clampCount(n int64) int64 { return min(max(n, 0), MaxStoredCount) }

// Load reads every cell in one MGET. A value that is not a count reads as
// MaxStoredCount, so a corrupt cell denies rather than admits; counts are
// clamped to [0, MaxStoredCount].
func (o *RedisOrigin) Load(ctx context.Context, cells []Cell) ([]int64, error) {
	keys := make([]string, len(cells))
	for i := range cells {
		keys[i] = RedisKey(&cells[i])
	}
	vals, err := o.client.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("redis mget %d cells: %w", len(keys), err)
	}
	counts := make([]int64, len(cells))
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // nil: the key does not exist
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			n = MaxStoredCount
		}
		counts[i] = clampCount(n)
	}
	return counts, nil
}

// Increment sends every increment in one pipeline.
func (o *RedisOrigin) Increment(ctx context.Context, incs []Increment) ([]int64, error) {
	pipe := o.client.Pipeline()
	cmds := make([]*redis.Cmd, len(incs))
	for i := range incs {
		ttl := max(incs[i].TTL.Milliseconds(), 1)
		// EVAL, not EVALSHA: a restarted server has lost its script cache,
		// and a pipeline of EVALSHA would then fail without telling which
		// commands ran. The script is a few hundred bytes a replayed cell.
		cmds[i] = incrementScript.Eval(ctx, pipe, []string{RedisKey(&incs[i].Cell)}, incs[i].Delta, ttl, MaxStoredCount)
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
		return counts, &PartialError{Err: err}
	}
	return counts, err
}

// RedisKey returns the Redis key of a cell: every variable part is prefixed
// by its length, so parts can never run into each other: namespace "a-b" with
// identifier "c" and namespace "a" with identifier "b-c" are different keys.
//
//	ratelimit:v1:<len>:<workspace><len>:<namespace><len>:<identifier>:<duration ms>:<sequence>
func RedisKey(c *Cell) string {
	b := make([]byte, 0, 32+len(c.Workspace)+len(c.Namespace)+len(c.Identifier))
	b = append(b, "ratelimit:v1:"...)
	for _, part := range [...]string{c.Workspace, c.Namespace, c.Identifier} {
		b = strconv.AppendInt(b, int64(len(part)), 10)
		b = append(b, ':')
		b = append(b, part...)
	}
	b = append(b, ':')
	b = strconv.AppendInt(b, c.Duration.Milliseconds(), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, c.Sequence, 10)
	return string(b)
}

// RedisOptions parses a redis:// or rediss:// URL into client options tuned
// for an origin: the caller's context deadline bounds every call (the limiter
// sets originTimeout on the request path), nothing is retried inside the
// client (the limiter retries replays itself), and a dead server is noticed
// within one originTimeout.
func RedisOptions(url string) (*redis.Options, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	opts.DialTimeout = originTimeout
	opts.PoolTimeout = originTimeout
	return opts, nil
}

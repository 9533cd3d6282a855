package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// The index of marked cells (see store.Unpublished) is indexShards sorted
// sets, a cell's member in the shard of its key's slot: on a cluster the
// marks of a region spread over the masters instead of landing on one. A
// member is "<limit>:<cell key>", its score the time of its last mark in
// unix ms.
const indexShards = 16

// indexKey returns the key of the index shard of a cell's key.
func indexKey(cellKey string) string { return indexKeys[int(slot(cellKey))%indexShards] }

// indexKeys are every shard's key.
var indexKeys = func() []string {
	out := make([]string, indexShards)
	for i := range out {
		out[i] = "ratelimit:v2:marked:{" + strconv.Itoa(i) + "}"
	}
	return out
}()

// indexTTL is how long a shard outlives its last mark: longer than any
// window, so that only a region whose every process stopped leaves one
// behind, and not for ever.
const indexTTL = 32 * 24 * time.Hour

var _ store.Unpublished = (*Store)(nil)

// A Store takes slots atomically: the limiter asks for it at run time,
// and a store that lost a method of the interface would decide slots
// from memory without a word.
var _ store.SlotTaker = (*Store)(nil)

// mark adds the marks of incs (those with Mark above 0, at the positions
// that were sent) to pipe, stamped now. A mark whose shard lives on a node
// whose breaker is not closed is left out: a pipeline waits for every node
// it reaches, and a dead one would hold up every replay until the call's
// timeout. A mark left out is only a mark: the cell's counter may still
// publish it, and the cell is marked again at its next full flush interval.
func (o *Store) mark(ctx context.Context, pipe redis.Pipeliner, incs []store.Increment, keys []string, sent func(int) bool, now time.Time) {
	for i := range incs {
		if incs[i].Mark <= 0 || !sent(i) {
			continue
		}
		shard := indexKey(keys[i])
		addr, err := o.nodeOf(ctx, shard)
		if err != nil || o.nodes.get(addr).breaker.State() != gobreaker.StateClosed {
			continue
		}
		pipe.ZAdd(ctx, shard, redis.Z{Score: float64(now.UnixMilli()), Member: strconv.FormatInt(incs[i].Mark, 10) + ":" + keys[i]})
		pipe.PExpire(ctx, shard, indexTTL)
	}
}

// Idle implements [store.Unpublished]: one ZRANGEBYSCORE per shard in one
// pipeline, then the cells' counts as Load reads them.
func (o *Store) Idle(ctx context.Context, before time.Time, max int) ([]store.IdleCell, error) {
	pipe := o.client.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(indexKeys))
	per := int64(max/indexShards + 1)
	for i, k := range indexKeys {
		cmds[i] = pipe.ZRangeByScoreWithScores(ctx, k, &redis.ZRangeBy{Min: "-inf", Max: "(" + strconv.FormatInt(before.UnixMilli(), 10), Count: per})
	}
	_, _ = pipe.Exec(ctx)
	var cells []store.IdleCell
	var errs []error
	garbage := o.client.Pipeline()
	for i, cmd := range cmds {
		zs, err := cmd.Result()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, z := range zs {
			member, _ := z.Member.(string)
			limit, key, ok := strings.Cut(member, ":")
			l, err := strconv.ParseInt(limit, 10, 64)
			k, kerr := parseKey(key)
			if !ok || err != nil || kerr != nil {
				garbage.ZRem(ctx, indexKeys[i], member) // not a member this package wrote
				continue
			}
			cells = append(cells, store.IdleCell{CellCount: store.CellCount{Key: k, Limit: l}, MarkedAt: int64(z.Score)})
		}
	}
	if garbage.Len() > 0 {
		_, _ = garbage.Exec(ctx)
	}
	if len(cells) == 0 {
		return nil, errors.Join(errs...)
	}
	keys := make([]store.CellKey, len(cells))
	for i := range cells {
		keys[i] = cells[i].Key
	}
	counts, err := o.Load(ctx, keys)
	if err != nil && counts == nil {
		return nil, fmt.Errorf("read the counts of idle cells: %w", err)
	}
	for i := range cells {
		if i < len(counts) {
			cells[i].Count = counts[i] // -1 for a cell of a node that failed
		}
	}
	return cells, errors.Join(append(errs, err)...)
}

// forgetScript removes each member ARGV[2i-1] from KEYS[1] if its score is
// still ARGV[2i]: a cell marked again since it was read stays.
var forgetScript = redis.NewScript(`
local n = 0
for i = 1, #ARGV, 2 do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s and tonumber(s) == tonumber(ARGV[i+1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n`)

// Forget implements [store.Unpublished]: one script per shard, in one
// pipeline.
func (o *Store) Forget(ctx context.Context, cells []store.IdleCell) error {
	byShard := map[string][]any{}
	for _, c := range cells {
		key := Key(&c.Key)
		shard := indexKey(key)
		byShard[shard] = append(byShard[shard], strconv.FormatInt(c.Limit, 10)+":"+key, c.MarkedAt)
	}
	pipe := o.client.Pipeline()
	cmds := make([]*redis.Cmd, 0, len(byShard))
	for shard, args := range byShard {
		cmds = append(cmds, forgetScript.Eval(ctx, pipe, []string{shard}, args...))
	}
	_, _ = pipe.Exec(ctx)
	var errs []error
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// parseKey is the inverse of Key.
func parseKey(s string) (store.CellKey, error) {
	bad := fmt.Errorf("not a cell key: %q", s)
	rest, ok := strings.CutPrefix(s, "ratelimit:v2:{")
	if !ok {
		return store.CellKey{}, bad
	}
	var parts [3]string
	for i := range parts {
		n, after, ok := strings.Cut(rest, ":")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || size < 0 || size > len(after) {
			return store.CellKey{}, bad
		}
		parts[i], rest = after[:size], after[size:]
	}
	rest, ok = strings.CutPrefix(rest, ":")
	rest, refunds := strings.CutSuffix(rest, refundsSuffix)
	sep := "}:"
	if pool, isPool := strings.CutPrefix(rest, "pool}:"); isPool {
		// A pool's cell: the tag ends before its code (see poolPrefix).
		rest, sep = pool, ":"
	}
	dur, seq, ok2 := strings.Cut(rest, sep)
	d, err := strconv.ParseInt(dur, 10, 64)
	q, err2 := strconv.ParseInt(seq, 10, 64)
	if !ok || !ok2 || err != nil || err2 != nil {
		return store.CellKey{}, bad
	}
	return store.CellKey{Workspace: parts[0], Namespace: parts[1], Identifier: parts[2],
		Duration: time.Duration(d) * time.Millisecond, Sequence: q, Refunds: refunds}, nil
}

package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// takeSlotsScript reads a concurrency limit's two cells and their refunds
// (KEYS[1] to KEYS[4], in one hash slot: they share their hash tag) and the
// totals of the cell's writers (KEYS[5], the hash beside KEYS[1]). If the
// hash holds ARGV[8] or more for writer ARGV[7], the take was applied
// before (its answer was lost): it answers taken and counts nothing.
// Otherwise, if what the cells hold (each less its refunds plus what is
// held beyond the store in it, ARGV[3] and ARGV[6], never below zero)
// leaves room under ARGV[2] for what the take adds (ARGV[8] less the
// writer's total), it keeps ARGV[8] as the writer's total, adds what it
// grew by to KEYS[1] (as every write of a total does: see totalScript)
// and keeps both at least ARGV[4] ms. It answers
// whether it took them and the four counts afterwards. A value that is not
// a count reads as ARGV[5], the largest count: in a cell it denies, in its
// releases it frees the cell, as the window limits' reads do (a corrupt
// key is the operator's to clear).
var takeSlotsScript = redis.NewScript(`
local max = tonumber(ARGV[5])
local function count(key)
  local n = tonumber(redis.call('GET', key) or '0')
  if n == nil or n > max then return max end
  if n < 0 then return 0 end
  return n
end
local cur, prev, curR, prevR = count(KEYS[1]), count(KEYS[2]), count(KEYS[3]), count(KEYS[4])
local total = tonumber(ARGV[8])
local old = tonumber(redis.call('HGET', KEYS[5], ARGV[7])) or 0
if old >= total then
  return {1, cur, prev, curR, prevR}
end
local add = total - old
local held = math.max(cur - curR + tonumber(ARGV[3]), 0) + math.max(prev - prevR + tonumber(ARGV[6]), 0)
-- limit - add, not held + add: Lua's numbers are doubles, exact to 2^53,
-- the largest limit, which held + add can pass (2^53 + 1 rounds to 2^53).
if held > tonumber(ARGV[2]) - add or cur > max - add then
  return {0, cur, prev, curR, prevR}
end
redis.call('HSET', KEYS[5], ARGV[7], ARGV[8])
cur = redis.call('INCRBY', KEYS[1], add)
for _, k in ipairs({KEYS[1], KEYS[5]}) do
  if redis.call('PTTL', k) < tonumber(ARGV[4]) then
    redis.call('PEXPIRE', k, ARGV[4])
  end
end
return {1, cur, prev, curR, prevR}`)

// TakeSlots implements [store.SlotTaker] with one script on the node of
// the limit's cells (not sent while its breaker is open).
func (o *Store) TakeSlots(ctx context.Context, t store.SlotTake) (store.SlotCounts, error) {
	keys := store.SlotKeys(t.Key)
	names := make([]string, len(keys), len(keys)+1)
	for i := range keys {
		names[i] = Key(&keys[i])
	}
	names = append(names, names[0]+writersSuffix)
	b := o.nodes.route(ctx, names[:1], o.nodeOf)
	var out store.SlotCounts
	if b.sent(0) {
		ttl := max(t.TTL.Milliseconds(), 1)
		vals, err := takeSlotsScript.Run(ctx, o.client, names, t.Cost, t.Limit, clampBeyond(t.Beyond[0]), ttl, store.MaxCount, clampBeyond(t.Beyond[1]),
			t.Writer, min(max(t.Total, 0), store.MaxCount)).Int64Slice()
		switch {
		case err != nil:
			b.fail(0, fmt.Errorf("redis take slots: %w", err))
		case len(vals) != 5:
			b.fail(0, fmt.Errorf("redis take slots: %d values answered, want 5", len(vals)))
		default:
			out = store.SlotCounts{Taken: vals[0] == 1, Cur: clampCount(vals[1]), Prev: clampCount(vals[2]),
				CurRefunds: clampCount(vals[3]), PrevRefunds: clampCount(vals[4])}
		}
	}
	if _, err := b.finish([]int64{0}); err != nil {
		return store.SlotCounts{}, err
	}
	return out, nil
}

// clampBeyond bounds what a caller holds beyond the store in a cell to
// ±MaxCount, the range of a count.
func clampBeyond(n int64) int64 { return min(max(n, -store.MaxCount), store.MaxCount) }

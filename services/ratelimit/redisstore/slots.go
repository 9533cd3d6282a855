package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// luaCount starts the scripts that read a pool's cells: count(key) reads a
// cell's count (or its refunds) as a number from 0 to ARGV[4], the
// largest count; a value that is not a count reads as the largest.
const luaCount = `
local max = tonumber(ARGV[4])
local function count(key)
  local n = tonumber(redis.call('GET', key) or '0')
  if n == nil or n > max then return max end
  if n < 0 then return 0 end
  return n
end`

// takeSlotsScript takes slots of a concurrency limit's pool, whose keys
// all start with ARGV[8] (one hash slot: they share their hash tag). It
// reads the pool's index (KEYS[3]: each cell written, scored by its end),
// drops the cells that ended at ARGV[7] (unix ms), and reads every other
// cell of it, with the cells named in ARGV[11] on (member, what is held
// beyond the store, in pairs) and the cell taken in (KEYS[1], member
// ARGV[9]): each one's count and refunds (its key and ":r"). If the
// totals of the cell's writers (KEYS[2]) hold ARGV[6] or more for writer
// ARGV[5], the take was applied before (its answer was lost): it answers
// taken and counts nothing. Otherwise, if what the cells hold (each less
// its refunds plus what is held beyond the store in it, never below zero)
// leaves room under ARGV[2] for what the take adds (ARGV[6] less the
// writer's total), it keeps ARGV[6] as the writer's total, adds what it
// grew by to KEYS[1] (as every write of a total does: see totalScript),
// files the cell in the index if it is not, scored by its end (ARGV[10]),
// and keeps what it wrote ARGV[3] ms (the index at least that long). It answers whether it took
// them and, for each cell, its member, count and refunds. A value that is
// not a count reads as ARGV[4], the largest count: in a cell it denies, in
// its releases it frees the cell, as the window limits' reads do (a
// corrupt key is the operator's to clear).
var takeSlotsScript = redis.NewScript(luaCount + `
local now = tonumber(ARGV[7])
local index = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
local beyond, seen, cells, ended = {}, {}, {}, {}
local function add(m)
  if not seen[m] then
    seen[m] = true
    cells[#cells + 1] = m
  end
end
local filed = false
for i = 1, #index, 2 do
  if tonumber(index[i + 1]) <= now then
    ended[#ended + 1] = index[i]
  else
    add(index[i])
    filed = filed or index[i] == ARGV[9]
  end
end
if #ended > 0 then
  redis.call('ZREM', KEYS[3], unpack(ended))
end
for i = 11, #ARGV, 2 do
  beyond[ARGV[i]] = (beyond[ARGV[i]] or 0) + tonumber(ARGV[i + 1])
  add(ARGV[i])
end
add(ARGV[9])
local out, held, target = {0}, 0, 0
for _, m in ipairs(cells) do
  local n, r = count(ARGV[8] .. m), count(ARGV[8] .. m .. ':r')
  held = held + math.max(n - r + (beyond[m] or 0), 0)
  if m == ARGV[9] then target = #out + 2 end
  out[#out + 1] = m
  out[#out + 1] = n
  out[#out + 1] = r
end
local total = tonumber(ARGV[6])
local old = tonumber(redis.call('HGET', KEYS[2], ARGV[5])) or 0
if old >= total then
  out[1] = 1
  return out
end
local add = total - old
-- limit - add, not held + add: Lua's numbers are doubles, exact to 2^53,
-- the largest limit, which held + add can pass (2^53 + 1 rounds to 2^53).
if held > tonumber(ARGV[2]) - add or out[target] > max - add then
  return out
end
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
out[target] = redis.call('INCRBY', KEYS[1], add)
-- Every writer of a cell keeps it until the same instant (its end and a
-- cell more), less its clock's skew: no longer expiry to keep.
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if not filed then
  redis.call('ZADD', KEYS[3], ARGV[10], ARGV[9])
  if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[3], ARGV[3])
  end
end
out[1] = 1
return out`)

// TakeSlots implements [store.SlotTaker] with one script on the node of
// the pool's cells (not sent while its breaker is open).
func (o *Store) TakeSlots(ctx context.Context, t store.SlotTake) (store.SlotCounts, error) {
	if !store.IsPoolCode(t.Key.Duration.Milliseconds()) || t.Key.Refunds {
		return store.SlotCounts{}, fmt.Errorf("redis take slots: %d is not a pool's cell", t.Key.Duration.Milliseconds())
	}
	prefix := poolPrefix(&t.Key)
	target := Key(&t.Key)
	names := []string{target, target + writersSuffix, prefix + poolIndexSuffix}
	b := o.nodes.route(ctx, names[:1], o.nodeOf)
	var out store.SlotCounts
	if b.sent(0) {
		ttl := max(t.TTL.Milliseconds(), 1)
		args := make([]any, 0, 10+2*len(t.Beyond))
		args = append(args, t.Cost, t.Limit, ttl, store.MaxCount, t.Writer, min(max(t.Total, 0), store.MaxCount),
			t.Now, prefix, poolMember(&t.Key), store.PoolCellEndOf(&t.Key))
		for i := range t.Beyond {
			if store.SamePool(&t.Beyond[i].Key, &t.Key) {
				args = append(args, poolMember(&t.Beyond[i].Key), clampBeyond(t.Beyond[i].Count))
			}
		}
		vals, err := takeSlotsScript.Run(ctx, o.client, names, args...).Slice()
		if err == nil {
			out, err = parseSlots(&t.Key, vals, false)
		}
		if err != nil {
			b.fail(0, fmt.Errorf("redis take slots: %w", err))
		}
	}
	if _, err := b.finish([]int64{0}); err != nil {
		return store.SlotCounts{}, err
	}
	return out, nil
}

// readSlotsScript reads a concurrency limit's pool as takeSlotsScript
// does (the index KEYS[1], cells at ARGV[1] and a member, the cell of
// member ARGV[3] whatever the index holds), the cells that end after
// ARGV[2] (unix ms), and writes nothing. It answers the total of writer
// ARGV[5] in the totals of the cell's writers (KEYS[2]; 0 when ARGV[5] is
// empty or has none) and, for each cell, its member, count and refunds.
// ARGV[4] is the largest count.
var readSlotsScript = redis.NewScript(luaCount + `
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[2], '+inf')
local out, seen = {0}, {}
if ARGV[5] ~= '' then
  local n = tonumber(redis.call('HGET', KEYS[2], ARGV[5]) or '0')
  if n ~= nil then out[1] = math.min(math.max(n, 0), max) end
end
members[#members + 1] = ARGV[3]
for _, m in ipairs(members) do
  if not seen[m] then
    seen[m] = true
    out[#out + 1] = m
    out[#out + 1] = count(ARGV[1] .. m)
    out[#out + 1] = count(ARGV[1] .. m .. ':r')
  end
end
return out`)

// ReadSlots implements [store.SlotTaker] with one read-only script on the
// node of the pool's cells (not sent while its breaker is open).
func (o *Store) ReadSlots(ctx context.Context, k store.CellKey, now int64, writer string) (store.SlotCounts, error) {
	if !store.IsPoolCode(k.Duration.Milliseconds()) || k.Refunds {
		return store.SlotCounts{}, fmt.Errorf("redis read slots: %d is not a pool's cell", k.Duration.Milliseconds())
	}
	prefix := poolPrefix(&k)
	b := o.nodes.route(ctx, []string{Key(&k)}, o.nodeOf)
	var out store.SlotCounts
	if b.sent(0) {
		vals, err := readSlotsScript.Run(ctx, o.client, readSlotsKeys(&k), prefix, now, poolMember(&k), store.MaxCount, writer).Slice()
		if err == nil {
			out, err = parseSlots(&k, vals, true)
		}
		if err != nil {
			b.fail(0, fmt.Errorf("redis read slots: %w", err))
		}
	}
	if _, err := b.finish([]int64{0}); err != nil {
		return store.SlotCounts{}, err
	}
	return out, nil
}

// readSlotsKeys returns readSlotsScript's keys for a read of the pool of
// k: the pool's index and the totals of k's writers.
func readSlotsKeys(k *store.CellKey) []string {
	return []string{poolPrefix(k) + poolIndexSuffix, Key(k) + writersSuffix}
}

// ReleaseSlots implements [store.SlotTaker]: the write of the releases'
// total (totalScript, as Increment sends it, with its mark) and the read
// of the pool (readSlotsScript) in one pipeline, on the node of the
// pool's cells, whose commands run in order: the read sees the release.
// It fails if either fails (the write may have applied: its total is
// written again by the caller's replay, once).
func (o *Store) ReleaseSlots(ctx context.Context, inc store.Increment, now int64) (int64, []store.PoolCell, error) {
	if !store.IsPoolCode(inc.Key.Duration.Milliseconds()) || !inc.Key.Refunds || inc.Writer == "" {
		return 0, nil, fmt.Errorf("redis release slots: %d is not the releases of a pool's cell, written as a total", inc.Key.Duration.Milliseconds())
	}
	pool := inc.Key
	pool.Refunds = false
	key := Key(&inc.Key)
	prefix := poolPrefix(&pool)
	b := o.nodes.route(ctx, []string{key}, o.nodeOf)
	var n int64
	var cells []store.PoolCell
	if b.sent(0) {
		pipe := o.client.Pipeline()
		write := evalTotal(ctx, pipe, key, &inc)
		o.mark(ctx, pipe, []store.Increment{inc}, []string{key}, b.sent, time.Now())
		read := readSlotsScript.Eval(ctx, pipe, readSlotsKeys(&pool), prefix, now, poolMember(&pool), store.MaxCount, "")
		_, _ = pipe.Exec(ctx) // each command's own error is read below
		var err error
		if n, err = write.Int64(); err == nil {
			var vals []any
			if vals, err = read.Slice(); err == nil {
				var out store.SlotCounts
				out, err = parseSlots(&pool, vals, true)
				cells = out.Cells
			}
		}
		if err != nil {
			b.fail(0, fmt.Errorf("redis release slots: %w", err))
		}
	}
	if _, err := b.finish([]int64{0}); err != nil {
		return 0, nil, err
	}
	return clampCount(n), cells, nil
}

// parseSlots reads takeSlotsScript's answer for a take in the pool of k,
// or (read) readSlotsScript's, whose first value is a writer's total.
func parseSlots(k *store.CellKey, vals []any, read bool) (store.SlotCounts, error) {
	if len(vals)%3 != 1 {
		return store.SlotCounts{}, fmt.Errorf("%d values answered, want 1 and three a cell", len(vals))
	}
	first, _ := vals[0].(int64)
	out := store.SlotCounts{Cells: make([]store.PoolCell, 0, len(vals)/3)}
	if read {
		out.Written = first
	} else {
		out.Taken = first == 1
	}
	for i := 1; i < len(vals); i += 3 {
		m, _ := vals[i].(string)
		code, seq, ok := strings.Cut(m, ":")
		d, err1 := strconv.ParseInt(code, 10, 64)
		s, err2 := strconv.ParseInt(seq, 10, 64)
		if !ok || err1 != nil || err2 != nil || !store.IsPoolCode(d) {
			continue // not a member this version writes
		}
		n, _ := vals[i+1].(int64)
		r, _ := vals[i+2].(int64)
		c := store.PoolCell{Key: *k, Count: clampCount(n), Refunds: clampCount(r)}
		c.Key.Duration, c.Key.Sequence = time.Duration(d)*time.Millisecond, s
		out.Cells = append(out.Cells, c)
	}
	return out, nil
}

// clampBeyond bounds what a caller holds beyond the store in a cell to
// ±MaxCount, the range of a count.
func clampBeyond(n int64) int64 { return min(max(n, -store.MaxCount), store.MaxCount) }

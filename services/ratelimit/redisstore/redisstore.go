// Package redisstore is the limiter's regional store on Redis: one
// server, or a Redis Cluster. The processes of a region add what they
// accepted to it and read from it what the others accepted (see
// store.Regional).
package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Store is a [store.Regional] on Redis: one server, or a Redis Cluster.
// Each cell is one string key holding its count; every cell of a window
// shares a hash tag, so on a cluster they live in one slot. It keeps a circuit
// breaker per node (see nodes), so that on a cluster a master that is down or
// failing over costs only its own keys their convergence.
type Store struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil for one server
	addr    string               // the one server's address
	nodes   *nodes
}

// Option configures a [Store].
type Option func(*settings)

type settings struct {
	logger     *slog.Logger
	registerer prometheus.Registerer
}

// WithLogger sets the logger of node failures and recoveries. The default
// discards everything.
func WithLogger(logger *slog.Logger) Option { return func(s *settings) { s.logger = logger } }

// WithRegisterer registers the store's metric, the state of each node's
// circuit breaker (unkey_ratelimit_origin_breaker_state{node}), with reg.
// Without it the metric is kept in a private registry.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(s *settings) { s.registerer = reg }
}

// New returns a store on client, a *redis.Client or a
// *redis.ClusterClient. It does not take ownership: closing the client is
// the caller's job. It returns an error only if its metric cannot be
// registered.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	st := settings{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&st)
	}
	if st.registerer == nil {
		st.registerer = prometheus.NewRegistry()
	}
	state := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "unkey_ratelimit_origin_breaker_state",
		Help: "State of the circuit breaker of each Redis node of the regional store: 0 closed, 1 half-open, 2 open (the node's keys are decided locally). A node no key went to for a minute is dropped.",
	}, []string{"node"})
	if err := st.registerer.Register(state); err != nil {
		return nil, fmt.Errorf("register redis store metrics: %w", err)
	}
	o := &Store{client: client}
	var reload func()
	switch c := client.(type) {
	case *redis.ClusterClient:
		o.cluster = c
		reload = func() { c.ReloadState(context.Background()) }
	case *redis.Client:
		o.addr = c.Options().Addr
	default:
		return nil, fmt.Errorf("redis store: want a *redis.Client or a *redis.ClusterClient, got %T", client)
	}
	o.nodes = newNodes(st.logger, state, reload)
	return o, nil
}

// Breakers returns the state of each node's circuit breaker by address:
// "closed", "half-open" or "open" (the node's keys are decided locally).
func (o *Store) Breakers() map[string]string {
	out := map[string]string{}
	o.nodes.byAddr.Range(func(addr string, n *node) bool {
		out[addr] = n.breaker.State().String()
		return true
	})
	return out
}

// nodeOf returns the address of the node that serves key: the one server,
// or the master of key's slot in the cluster client's slot map.
func (o *Store) nodeOf(ctx context.Context, key string) (string, error) {
	if o.cluster == nil {
		return o.addr, nil
	}
	c, err := o.cluster.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	return c.Options().Addr, nil
}

// incrementScript adds ARGV[1] to KEYS[1], raises it to ARGV[4] if it then
// holds less (the caller's floor: a server that lost its data is re-seeded),
// and sets its expiry to ARGV[2] ms, in one atomic step: a crash between
// them can never leave a key without an expiry. It keeps the longer expiry
// if the key already has one. A key that INCRBY cannot add to (its value is
// not a 64-bit integer, the sum would overflow, or it is not a string) is
// set to ARGV[3], the largest count the limiter takes: a corrupt cell fails
// closed until it expires, and never fails the other commands of the
// pipeline. A cell of a concurrency limit's pool is filed in the pool's
// index, KEYS[2], as member ARGV[5] scored ARGV[6] (see poolPrefix).
var incrementScript = redis.NewScript(`
local ok, n = pcall(redis.call, 'INCRBY', KEYS[1], ARGV[1])
if not ok then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
  return tonumber(ARGV[3])
end
local floor = tonumber(ARGV[4])
if n < floor then
  redis.call('SET', KEYS[1], ARGV[4], 'KEEPTTL')
  n = floor
end
if KEYS[2] then
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[5])
end
for _, k in ipairs(KEYS) do
  if redis.call('PTTL', k) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', k, ARGV[2])
  end
end
return n`)

// totalScript keeps ARGV[2] as the total of writer ARGV[1] in the hash
// KEYS[2] if it is the largest that writer sent, adds what the writer's
// total grew by to the cell KEYS[1] (at most ARGV[4]), and keeps both keys
// at least ARGV[3] ms, in one atomic step: a cell written as totals (its
// refunds, a concurrency limit's slots), so that a write applied twice
// counts once (see store.Increment). The cell grows by each writer's
// growth rather than being set to the hash's sum, so that what a writer of
// increments added to it (a process of an earlier version, during a
// rolling upgrade) stays counted. The hash holds one field per writer. A
// field that is not a number counts 0. A cell of a concurrency limit's
// pool is filed in the pool's index, KEYS[3], as incrementScript files it.
var totalScript = redis.NewScript(`
local old = tonumber(redis.call('HGET', KEYS[2], ARGV[1])) or 0
local total = tonumber(ARGV[2])
local n = tonumber(redis.call('GET', KEYS[1]) or '0') or tonumber(ARGV[4])
if total > old then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  n = math.min(redis.call('INCRBY', KEYS[1], total - old), tonumber(ARGV[4]))
end
if KEYS[3] then
  redis.call('ZADD', KEYS[3], ARGV[6], ARGV[5])
end
for _, k in ipairs(KEYS) do
  if redis.call('PTTL', k) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', k, ARGV[3])
  end
end
return n`)

// evalTotal queues in pipe the write of inc, a total of its Writer, to
// key (inc's cell), and, for a pool's cell, its filing in the pool's
// index (see totalScript).
func evalTotal(ctx context.Context, pipe redis.Pipeliner, key string, inc *store.Increment) *redis.Cmd {
	ttl := max(inc.TTL.Milliseconds(), 1)
	total := min(max(inc.Total, 0), store.MaxCount)
	names := append([]string{key, key + writersSuffix}, poolIndex(&inc.Key)...)
	args := append([]any{inc.Writer, total, ttl, store.MaxCount}, poolArgs(&inc.Key)...)
	return totalScript.Eval(ctx, pipe, names, args...)
}

// poolIndex returns the key of the index of k's pool, if k is a cell of a
// concurrency limit's pool, for the scripts that write it; none otherwise.
// A cell's refunds are not filed: a take reads the refunds of every cell
// it reads, and a cell whose only writes are releases (of slots another
// region counted) is read by the takes that know of it (see
// store.SlotTake.Beyond).
func poolIndex(k *store.CellKey) []string {
	if !store.IsPoolCode(k.Duration.Milliseconds()) || k.Refunds {
		return nil
	}
	return []string{poolPrefix(k) + poolIndexSuffix}
}

// poolArgs returns the member and the score that file pool cell k in its
// pool's index; none if poolIndex names none.
func poolArgs(k *store.CellKey) []any {
	if poolIndex(k) == nil {
		return nil
	}
	return []any{poolMember(k), store.PoolCellEndOf(k)}
}

// clampCount bounds a count read from Redis to [0, store.MaxCount].
// Redis holds whatever anyone wrote: a negative count must not lend budget,
// and a huge one must not overflow the decision maths.
func clampCount(n int64) int64 { return min(max(n, 0), store.MaxCount) }

// Load reads every cell in one MGET, or on a cluster, unless every cell is
// in one slot, one MGET per hash slot, sent in one pipeline (which the
// cluster client splits per node and sends to the nodes at once). Cells of
// a node whose breaker is open are not sent; they, and the cells of a node
// that fails, count -1 (see [store.Regional]). A value that is not a count
// reads as store.MaxCount, so a corrupt cell denies rather than
// admits; counts are clamped to [0, store.MaxCount].
func (o *Store) Load(ctx context.Context, cells []store.CellKey) ([]int64, error) {
	if len(cells) == 0 {
		return nil, nil
	}
	keys := make([]string, len(cells))
	for i := range cells {
		keys[i] = Key(&cells[i])
	}
	b := o.nodes.route(ctx, keys, o.nodeOf)
	counts := make([]int64, len(cells))
	var sent []int // the keys sent, when not all were
	sentKeys := keys
	for i := range keys {
		if !b.sent(i) {
			sent = make([]int, 0, len(keys))
			break
		}
	}
	if sent != nil {
		sentKeys = make([]string, 0, len(keys))
		for i, k := range keys {
			if b.sent(i) {
				sent = append(sent, i)
				sentKeys = append(sentKeys, k)
			}
		}
	}
	switch {
	case len(sentKeys) == 0:
	case o.cluster == nil || sameSlot(sentKeys):
		// One server, or one slot (one window's cells always are): one
		// MGET, without a pipeline and without grouping.
		vals, err := o.client.MGet(ctx, sentKeys...).Result()
		if err != nil {
			for j := range sentKeys {
				b.fail(at(sent, j), fmt.Errorf("redis mget %d cells: %w", len(sentKeys), err))
			}
			break
		}
		parseCounts(vals, counts, sent)
	default:
		o.loadBySlot(ctx, b, sentKeys, sent, counts)
	}
	return b.finish(counts)
}

// loadBySlot reads keys (the i-th for cell at(sent, i)) with one MGET per
// hash slot, in one pipeline.
func (o *Store) loadBySlot(ctx context.Context, b *batch, keys []string, sent []int, counts []int64) {
	bySlot := make(map[uint16][]int) // positions in keys
	for j, k := range keys {
		sl := slot(k)
		bySlot[sl] = append(bySlot[sl], j)
	}
	pipe := o.client.Pipeline()
	type slotGet struct {
		at  []int // cells
		cmd *redis.SliceCmd
	}
	gets := make([]slotGet, 0, len(bySlot))
	for _, js := range bySlot {
		ks := make([]string, len(js))
		cells := make([]int, len(js))
		for n, j := range js {
			ks[n], cells[n] = keys[j], at(sent, j)
		}
		gets = append(gets, slotGet{at: cells, cmd: pipe.MGet(ctx, ks...)})
	}
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	for _, g := range gets {
		if err := g.cmd.Err(); err != nil {
			for _, i := range g.at {
				b.fail(i, fmt.Errorf("redis mget %d cells: %w", len(g.at), err))
			}
			continue
		}
		parseCounts(g.cmd.Val(), counts, g.at)
	}
}

// at returns the cell of the j-th key sent: sent[j], or j when every key
// was sent (sent is nil).
func at(sent []int, j int) int {
	if sent == nil {
		return j
	}
	return sent[j]
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
// at idx[i] (at i if idx is nil).
func parseCounts(vals []any, counts []int64, idx []int) {
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // nil: the key does not exist
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			n = store.MaxCount
		}
		counts[at(idx, i)] = clampCount(n)
	}
}

// Increment sends every increment in one pipeline, but those of a node
// whose breaker is open, which count -1 as those that fail do; the marks of
// the cells sent go in the same pipeline (see store.Unpublished), and a mark
// that fails is only a mark: it fails no increment.
func (o *Store) Increment(ctx context.Context, incs []store.Increment) ([]int64, error) {
	keys := make([]string, len(incs))
	for i := range incs {
		keys[i] = Key(&incs[i].Key)
	}
	b := o.nodes.route(ctx, keys, o.nodeOf)
	pipe := o.client.Pipeline()
	cmds := make([]*redis.Cmd, len(incs))
	for i := range incs {
		if !b.sent(i) {
			continue
		}
		ttl := max(incs[i].TTL.Milliseconds(), 1)
		// EVAL, not EVALSHA: a restarted server has lost its script cache,
		// and a pipeline of EVALSHA would then fail without telling which
		// commands ran. The script is a few hundred bytes a replayed cell.
		names, pool := []string{keys[i]}, poolIndex(&incs[i].Key)
		if incs[i].Writer != "" {
			cmds[i] = evalTotal(ctx, pipe, keys[i], &incs[i])
			continue
		}
		floor := min(max(incs[i].Floor, 0), store.MaxCount)
		args := []any{incs[i].Delta, ttl, store.MaxCount, floor}
		cmds[i] = incrementScript.Eval(ctx, pipe, append(names, pool...), append(args, poolArgs(&incs[i].Key)...)...)
	}
	o.mark(ctx, pipe, incs, keys, b.sent, time.Now())
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx) // each command's own error is read below
	}
	counts := make([]int64, len(incs))
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		n, err := cmd.Int64()
		if err != nil {
			b.fail(i, fmt.Errorf("redis increment: %w", err))
			continue
		}
		counts[i] = clampCount(n)
	}
	return b.finish(counts)
}

// Warm reads a cluster client's map of slots and nodes now, once, instead
// of at the first command: a client that first reads it after a master
// died knows only its seeds, and if the dead master was the only seed it
// knows, never learns of the replica that took over. Call it before a
// process takes traffic; for one server it is a PING.
func Warm(ctx context.Context, client redis.UniversalClient) error {
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: read the cluster's map: %w", err)
	}
	return nil
}

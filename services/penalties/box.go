package penalties

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/puzpuzpuz/xsync/v4"

	"github.com/unkeyed/ratelimit/services/penalties/memstore"
	"github.com/unkeyed/ratelimit/services/penalties/store"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Key names one penalty box: an identifier of a workspace's namespace.
type Key = store.Key

// Block is a box's state (see [store.Block]).
type Block = store.Block

// ErrNotFound is returned for an identifier that no block holds.
var ErrNotFound = store.ErrNotFound

// Defaults of a Box.
const (
	// DefaultPollInterval is how often a Box reads the blocks other
	// processes started: a block holds fleet-wide within about this.
	DefaultPollInterval = time.Second
	// DefaultMaxBlocks is how many boxes a process keeps in memory: each
	// is a denied identifier's, about 200 bytes.
	DefaultMaxBlocks = 1_000_000
	// MaxPenalty is the longest block: a penalty, a cap, and what
	// doubling reaches without a cap.
	MaxPenalty = ratelimit.MaxDuration
	// pollLookback is how far before the store's clock at its previous
	// read a poll reads again: a write whose statement began before that
	// read and committed after it.
	pollLookback = 2 * time.Second
	// storeTimeout bounds each statement of the background loops.
	storeTimeout = 2 * time.Second
	// loadTimeout bounds the read of every block that matters, at start
	// (a poll from 0): up to the blocks memory holds, a million rows.
	loadTimeout = 30 * time.Second
	// writesPerTurn is the most blocks a turn of the loop writes, so that
	// a burst of offences (each a transaction) does not hold back the
	// polls that bring other processes' blocks: the rest follow at the
	// next turns.
	writesPerTurn = 1000
	// janitorInterval is how often memory forgets the boxes that stopped
	// mattering.
	janitorInterval = time.Minute
)

// Box is a process's penalty boxes. Its methods are safe for concurrent
// use; make it with [New].
type Box struct {
	// store answers callers (Get, List, Lift); loopStore the background
	// writes and polls.
	store, loopStore store.Penalties
	clock            ratelimit.Clock
	logger           *slog.Logger
	poll             time.Duration
	max              int64

	boxes *xsync.Map[Key, Block]
	live  atomic.Int64
	// since is the since of the next poll (see pollOnce): 0 until a
	// poll read every block that matters.
	since atomic.Int64

	// pending holds the blocks and clearances still to write, merged by
	// key: a burst of offences costs one write a key.
	mu      sync.Mutex
	pending map[Key]Block
	wake    chan struct{}

	metrics *metrics
}

// Option configures a [Box].
type Option func(*Box)

// WithStore keeps the blocks in st, shared by the fleet, instead of this
// process's memory (a [memstore.Store]).
func WithStore(st store.Penalties) Option { return func(b *Box) { b.store = st } }

// WithLoopStore has the background writes and polls use st instead of
// the store of [WithStore]: the same table through a pool of its own, so
// that callers' reads, however slow, never hold the loop back.
func WithLoopStore(st store.Penalties) Option { return func(b *Box) { b.loopStore = st } }

// WithClock sets the clock blocks are started and read by.
func WithClock(c ratelimit.Clock) Option { return func(b *Box) { b.clock = c } }

// WithLogger sets the logger of the background loop.
func WithLogger(l *slog.Logger) Option { return func(b *Box) { b.logger = l } }

// WithPollInterval sets how often [Box.Run] reads other processes' blocks
// ([DefaultPollInterval] if d is not positive).
func WithPollInterval(d time.Duration) Option {
	return func(b *Box) {
		if d > 0 {
			b.poll = d
		}
	}
}

// WithMaxBlocks sets how many boxes memory holds ([DefaultMaxBlocks] if n
// is not positive). An offence past it blocks nothing (the limit still
// denies) and is counted in unkey_ratelimit_penalties_total{kind="dropped"}.
func WithMaxBlocks(n int64) Option {
	return func(b *Box) {
		if n > 0 {
			b.max = n
		}
	}
}

// WithRegisterer registers the box's metrics with reg. Without it they
// are kept in a private registry.
func WithRegisterer(reg prometheus.Registerer) Option { return func(b *Box) { b.metrics.reg = reg } }

// New returns an empty box. It starts nothing and reads nothing: call
// [Box.Run] to load the blocks in force and follow the fleet's. It
// returns an error only if its metrics cannot be registered.
func New(opts ...Option) (*Box, error) {
	b := &Box{
		clock:   ratelimit.SystemClock{},
		logger:  slog.New(slog.DiscardHandler),
		poll:    DefaultPollInterval,
		max:     DefaultMaxBlocks,
		boxes:   xsync.NewMap[Key, Block](),
		pending: map[Key]Block{},
		wake:    make(chan struct{}, 1),
		metrics: &metrics{},
	}
	for _, o := range opts {
		o(b)
	}
	if b.store == nil {
		b.store = memstore.New(memstore.WithClock(b.clock))
	}
	if b.loopStore == nil {
		b.loopStore = b.store
	}
	if err := b.metrics.register(); err != nil {
		return nil, fmt.Errorf("register penalty metrics: %w", err)
	}
	return b, nil
}

// Empty reports whether memory holds no box: no decision can be blocked,
// and none need read the clock to know it.
func (b *Box) Empty() bool { return b.live.Load() == 0 }

// Now is the box's clock, in unix ms.
func (b *Box) Now() int64 { return b.clock.Now().UnixMilli() }

// Blocked returns the block in force on k at now (unix ms), if one is. It
// reads memory only; with no block anywhere it costs one atomic load.
func (b *Box) Blocked(k Key, now int64) (Block, bool) {
	if b.live.Load() == 0 {
		return Block{}, false
	}
	x, ok := b.boxes.Load(k)
	if !ok || !x.InForce(now) {
		return Block{}, false
	}
	return x, true
}

// Offend records that a limit with a penalty denied a decision of k at
// now, and returns the block that holds k from now on: the one in force,
// if a concurrent offence started it; otherwise a new block of penalty,
// or, for an offence within one block's length after the previous block
// ended, of twice that block's length (at least penalty), in both cases
// at most penaltyMax (MaxPenalty if 0). The block applies here at once
// and is written to the store in the background. With memory full (see
// WithMaxBlocks) it starts no block and returns the zero Block.
func (b *Box) Offend(k Key, penalty, penaltyMax time.Duration, now int64) Block {
	limit := penaltyMax
	if limit <= 0 {
		limit = MaxPenalty
	}
	p, top := penalty.Milliseconds(), max(limit.Milliseconds(), penalty.Milliseconds())
	var out Block
	kind := kindFirst
	stored := true
	b.boxes.Compute(k, func(old Block, loaded bool) (Block, xsync.ComputeOp) {
		if !loaded {
			if b.live.Load() >= b.max {
				stored = false // no block: the limit's denial alone
				return old, xsync.CancelOp
			}
			old = Block{Key: k}
		}
		if old.InForce(now) {
			out, kind = old, ""
			return old, xsync.CancelOp
		}
		length := p
		if !old.Void() && now < old.Expires() {
			length, kind = min(max(2*old.Length(), p), top), kindRepeat
		}
		start := max(now, old.Cleared+1)
		// Written with the lift this process read, so that it wins over it
		// (see store.Merge).
		out = store.Merge(old, Block{Key: k, Start: start, Until: start + length, Cleared: old.Cleared})
		if !loaded {
			b.live.Add(1)
		}
		return out, xsync.UpdateOp
	})
	switch {
	case !stored:
		b.metrics.penalties.WithLabelValues(kindDropped).Inc()
	case kind != "":
		b.metrics.penalties.WithLabelValues(kind).Inc()
		b.write(out)
	}
	return out
}

// write queues x for the store and wakes the loop.
func (b *Box) write(x Block) {
	b.mu.Lock()
	if old, ok := b.pending[x.Key]; ok {
		x = store.Merge(old, x)
	} else if int64(len(b.pending)) >= b.max {
		b.mu.Unlock()
		b.metrics.storeErrors.WithLabelValues("queue_full").Inc()
		return
	}
	b.pending[x.Key] = x
	b.mu.Unlock()
	b.signal()
}

// signal wakes the loop to write what is pending.
func (b *Box) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// merge applies x, read from the store, to memory: over the box memory
// holds, whatever it is (a lift too); as a new box only if it blocks or
// may double a block, and memory has room.
func (b *Box) merge(x Block, now int64) {
	b.boxes.Compute(x.Key, func(old Block, loaded bool) (Block, xsync.ComputeOp) {
		if !loaded {
			if x.Void() || x.Expires() <= now || b.live.Load() >= b.max {
				return old, xsync.CancelOp
			}
			b.live.Add(1)
			return x, xsync.UpdateOp
		}
		return store.Merge(old, x), xsync.UpdateOp
	})
}

// Get returns the block in force on k: the store's and memory's, merged;
// ErrNotFound if none; the store's error if it fails (a block is read
// and lifted where every process reads it, or not at all).
func (b *Box) Get(ctx context.Context, k Key) (Block, error) {
	now := b.Now()
	x, err := b.store.Get(ctx, k)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Block{}, fmt.Errorf("read penalty: %w", err)
	}
	if local, ok := b.boxes.Load(k); ok {
		x = store.Merge(x, local)
	}
	x.Key = k
	if !x.InForce(now) {
		return Block{}, ErrNotFound
	}
	return x, nil
}

// List returns up to limit of the blocks in force in a namespace, after
// the identifier after, in identifier order, as the store holds them.
func (b *Box) List(ctx context.Context, workspace, namespace, after string, limit int) ([]Block, error) {
	now := b.Now()
	var out []Block
	for len(out) < limit {
		page, err := b.store.List(ctx, workspace, namespace, after, now, limit)
		if err != nil {
			return nil, fmt.Errorf("list penalties: %w", err)
		}
		for _, x := range page {
			if x.InForce(now) && len(out) < limit {
				out = append(out, x)
			}
		}
		if len(page) < limit {
			break
		}
		after = page[len(page)-1].Identifier
	}
	return out, nil
}

// Lift ends the block in force on k, here at once and in the store before
// it returns, so that every process lifts it within a poll: an offence
// after it starts a first block again. Every block that began before the
// lift, in any process, ends with it; one that began after it (another
// process's offence before that process read the lift, or any since)
// holds (see store.Merge). It returns ErrNotFound if no block holds k.
func (b *Box) Lift(ctx context.Context, k Key) error {
	if _, err := b.Get(ctx, k); err != nil {
		return err
	}
	now := b.Now()
	clear := Block{Key: k, Cleared: now}
	b.boxes.Compute(k, func(old Block, loaded bool) (Block, xsync.ComputeOp) {
		if !loaded {
			return old, xsync.CancelOp
		}
		return store.Merge(old, clear), xsync.UpdateOp
	})
	if err := b.store.Merge(ctx, clear); err != nil {
		b.write(clear) // the loop writes it once the store answers
		return fmt.Errorf("lift penalty: %w", err)
	}
	return nil
}

// Load reads every block that still matters from the store, so that a
// process started during a block holds it from its first request. Run
// loads them if Load did not.
func (b *Box) Load(ctx context.Context) error {
	if err := b.pollOnce(ctx); err != nil {
		return fmt.Errorf("load penalties: %w", err)
	}
	return nil
}

// Run loads the blocks that still matter (those written since Load, if
// it ran), then follows the fleet's every poll interval, writes new
// blocks as they start, and forgets the boxes that stopped mattering,
// until ctx ends; it then writes what is pending once more and returns
// nil. A store that fails is logged and tried again at the next turn:
// memory keeps deciding meanwhile.
func (b *Box) Run(ctx context.Context) error {
	poll := time.NewTicker(b.poll)
	defer poll.Stop()
	janitor := time.NewTicker(janitorInterval)
	defer janitor.Stop()
	_ = b.pollOnce(ctx)
	for {
		select {
		case <-ctx.Done():
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
			for b.flush(stop) {
			}
			cancel()
			return nil
		case <-b.wake:
			b.flush(ctx)
		case <-poll.C:
			b.flush(ctx)
			_ = b.pollOnce(ctx)
		case <-janitor.C:
			b.forget(b.Now())
		}
	}
}

// pollOnce merges the blocks written since the last poll into memory
// (every one that matters, the first time), and moves the next poll's
// since on; a store that fails leaves it, and is logged.
func (b *Box) pollOnce(ctx context.Context) error {
	since := b.since.Load()
	timeout := storeTimeout
	if since == 0 {
		timeout = loadTimeout
	}
	rc, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	now := b.Now()
	changes, clock, err := b.loopStore.Changes(rc, since, now, int(min(b.max, math.MaxInt32)))
	if err != nil {
		b.metrics.storeErrors.WithLabelValues("poll").Inc()
		if ctx.Err() == nil {
			b.logger.Warn("penalties: poll failed; blocks started elsewhere apply here once it answers", "error", err)
		}
		return err
	}
	for _, x := range changes {
		b.merge(x, now)
	}
	b.since.Store(max(clock-pollLookback.Milliseconds(), 1))
	return nil
}

// flush writes up to writesPerTurn pending blocks until one fails; that
// one and the rest wait for the next turn, which a flush that left some
// asks for at once. It reports whether it left some and none failed.
func (b *Box) flush(ctx context.Context) bool {
	b.mu.Lock()
	todo := make([]Block, 0, min(len(b.pending), writesPerTurn))
	for k, x := range b.pending {
		if len(todo) == cap(todo) {
			break
		}
		todo = append(todo, x)
		delete(b.pending, k)
	}
	more := len(b.pending) > 0
	b.mu.Unlock()
	if more {
		b.signal()
	}
	if len(todo) == 0 {
		return false
	}
	failed := 0
	var first error
	for _, x := range todo {
		if first != nil {
			// The store failed once this turn: the rest wait for the
			// next, so that a store that hangs holds the loop (and its
			// polls) back for one timeout, not one a block.
			b.requeue(x)
			continue
		}
		rc, cancel := context.WithTimeout(ctx, storeTimeout)
		err := b.loopStore.Merge(rc, x)
		cancel()
		if err != nil {
			failed++
			first = err
			b.requeue(x)
		}
	}
	if failed > 0 {
		b.metrics.storeErrors.WithLabelValues("write").Add(float64(failed))
		if ctx.Err() == nil {
			b.logger.Warn("penalties: writes failed; they hold here and are tried again", "failed", failed, "error", first)
		}
	}
	return more && first == nil
}

// requeue puts x back among the pending writes, unless they are full.
func (b *Box) requeue(x Block) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.pending[x.Key]; ok {
		x = store.Merge(old, x)
	} else if int64(len(b.pending)) >= b.max {
		return
	}
	b.pending[x.Key] = x
}

// forget drops the boxes that stopped mattering at now.
func (b *Box) forget(now int64) {
	b.boxes.Range(func(k Key, x Block) bool {
		if x.Expires() <= now {
			b.boxes.Compute(k, func(old Block, loaded bool) (Block, xsync.ComputeOp) {
				if loaded && old.Expires() <= now {
					b.live.Add(-1)
					return old, xsync.DeleteOp
				}
				return old, xsync.CancelOp
			})
		}
		return true
	})
}

// Package regional is the limiter's regional tier: it shares the counts
// of the processes of one region through the regional store (Redis). A
// decision reads the store first only when its key is cold, strict or
// its copy aged; what a process counts is replayed every few
// milliseconds; slots of a concurrency limit are taken in the store
// atomically. It knows the cell table, the pools and the store, and asks
// the limiter's models what it needs of them (see Models).
package regional

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sync/singleflight"

	"github.com/puzpuzpuz/xsync/v4"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/pool"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Tuning of the regional tier. Unlike the global intervals, which trade
// MySQL load against cross-region latency and are the operator's to set,
// these are package constants: they are already far below what a request
// notices (milliseconds), and per-process knobs would only let processes of
// one region drift apart.
const (
	// ReplayInterval is how often accepted increments are sent to the
	// regional store. Another process sees them at most this long (plus a
	// round trip) after they were accepted; in that time all increments of
	// one cell coalesce into one command.
	ReplayInterval = 10 * time.Millisecond
	// backgroundTimeout bounds one background round trip (replay or refresh). A
	// pipeline of a few thousand cells takes milliseconds; a stuck server must
	// fail calls fast enough for the store's circuit breaker to open within
	// seconds.
	backgroundTimeout = 500 * time.Millisecond
	// FreshnessInterval is how old a warm window's last read may be before a
	// request on it starts a background refresh. The request itself decides
	// from memory and never waits. A key with a request at least this often
	// is refreshed before its copy reaches MaxCopyAge, so it never waits on
	// the store.
	FreshnessInterval = 500 * time.Millisecond
	// MaxCopyAge is the oldest copy of the region's counts a decision may
	// rely on. A request on a window whose last read began longer ago (a key
	// that sat idle) reads the store first, as for a cold cell: otherwise a
	// process would admit from what it knew before the idle spell, while
	// other processes spent the budget. Requests that arrive during that
	// read wait for it instead of asking again.
	MaxCopyAge = time.Second
	// StrictRefreshInterval is how often, at most, a strict window (one that
	// denied, or admitted leaving at most strictHeadroom of its limit, within
	// the last duration) refreshes from the store before
	// deciding; windows under 10 s refresh every hundredth of their length.
	// At most one request per window and interval pays the round trip; the
	// others decide from memory, so abuse cannot become one store read per
	// request.
	StrictRefreshInterval = 100 * time.Millisecond
	// strictHeadroom: an admission that leaves at most this share of the
	// limit (a bucket's burst) makes the key strict, as a denial does.
	strictHeadroom = 0.2
)

// Tier shares counts between the processes of one region through the
// regional store: before a decision it brings the window up to date as far
// as the decision may wait (Prepare), after it queues what was counted
// (AfterDecide), and its loop (Run) replays the queued increments and
// refreshes stale windows. A nil *Tier is a process without a regional
// store: Prepare, PrepareBatch, AfterDecide and Forget do nothing.
type Tier struct {
	store   store.Regional
	clock   Clock
	metrics *Metrics
	// table is the limiter's cell table: reads of a reserved cell find
	// its key's refunds window there, or create it; pools are its
	// concurrency pools.
	table *cells.Table
	pools *pool.Set
	// models is what the tier asks the limiter's models.
	models Models

	flight    singleflight.Group // one read per cold cell
	replays   cells.Queue[cells.Ref]
	refreshes cells.Queue[*cells.Window]
	// mark, set when the region has a global store, returns the limit to
	// mark a replayed cell with in the store's index of cells to publish,
	// or 0 (see MarkWith).
	mark func(w *cells.Window, c *cells.Cell) int64
	// writer names this process's refunds and slots in the store (see
	// increment and TakeSlots).
	writer string
	// lost holds the takes of slots whose answers were lost, until a
	// replay writes their totals (see lostTake).
	lost struct {
		mu    sync.Mutex
		takes []*lostTake
	}
	// totals holds, for each window whose cells this process writes as
	// totals (refunds, slots), what it wrote into each of its two cells
	// in all (see addTotal); lanes, for each concurrency limit's window
	// this process took slots of, the writers it took them as (see
	// takeLanes). writers numbers their names.
	totals  *xsync.Map[*cells.Window, *writtenTotals]
	lanes   *xsync.Map[*cells.Window, *takeLanes]
	writers atomic.Uint64
}

// Clock tells the time: the limiter's clock, which tests move by hand.
type Clock interface {
	Now() time.Time
}

// Models is what the tier asks the limiter's models of a window's cells.
type Models interface {
	// Raise raises v, a count of c (a cell of w), to n if below it, at
	// now (unix ms): the window's model keeps what it derives from its
	// cells with them (a token bucket's level).
	Raise(w *cells.Window, c *cells.Cell, v *atomic.Int64, n, now int64)
	// WrittenAsTotals reports whether w's cells are written to the store
	// as this process's totals, each the largest of its writer's, rather
	// than as increments (refunds, slots): a total written twice counts
	// once.
	WrittenAsTotals(w *cells.Window) bool
}

// New returns the tier that shares counts through st, over table and
// its pools, asking models. It starts no goroutines: see Run.
func New(st store.Regional, clock Clock, m *Metrics, table *cells.Table, pools *pool.Set, models Models) *Tier {
	return &Tier{store: st, clock: clock, metrics: m, table: table, pools: pools, models: models,
		writer: newWriterID(), totals: xsync.NewMap[*cells.Window, *writtenTotals](),
		lanes: xsync.NewMap[*cells.Window, *takeLanes]()}
}

// MarkWith makes each replay of a cell ask mark (the global tier's, when
// the region has a global store whose regional store indexes marks) for
// the limit to mark it with in the store's index of cells to publish, or
// 0.
func (r *Tier) MarkWith(mark func(w *cells.Window, c *cells.Cell) int64) { r.mark = mark }

// Forget drops what the tier keeps of w, which the janitor removed: what
// it gave back, the lanes it took slots through.
func (r *Tier) Forget(w *cells.Window) {
	if r != nil {
		r.totals.Delete(w)
		r.lanes.Delete(w)
	}
}

// Pending returns how many cells wait for a replay and windows for a
// background refresh.
func (r *Tier) Pending() (replays, refreshes int) {
	return r.replays.Len(), r.refreshes.Len()
}

// newWriterID returns a name for this process's writes of refunds to the
// regional store (see store.Increment.Writer): 16 random bytes in hex, so
// that two processes, or one process and its restart, never share one.
func newWriterID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// increment returns the write that sends delta more of c, a cell of w, to
// the regional store at now (unix ms): a count's increment, raised to what
// the store is known to hold; or for a cell of refunds, and for a cell of
// a concurrency limit's slots, the total this process wrote into it so
// far, delta included, which the store keeps as the largest of this
// writer's (see store.Increment.Writer): a refund written twice gives back
// once, and slots written twice are counted once (the process's takes
// are totals of other writers, its lanes: see takeLane). A write of totals
// that fails is sent again with its total, not its delta (see resend).
func (r *Tier) increment(w *cells.Window, c *cells.Cell, delta, now int64) store.Increment {
	inc := store.Increment{Key: w.CellKey(c.Seq()), Delta: delta,
		TTL: time.Duration(w.ExpiresAt(c.Seq())-now) * time.Millisecond}
	if r.models.WrittenAsTotals(w) {
		inc.Delta = 0
		name, total := r.addTotal(w, c.Seq(), delta)
		inc.Writer, inc.Total = r.writer+"/"+name, total
		return inc
	}
	if held := c.Stored.Load(); held > 0 {
		inc.Floor = held + delta
	}
	return inc
}

// resend queues c, a cell of w whose write failed, for the next replay:
// a count's delta is added again (counted twice rather than lost); a
// total (refunds, slots) already holds it, so it is sent again as it is.
func (r *Tier) resend(w *cells.Window, c *cells.Cell, inc store.Increment) {
	if inc.Writer != "" || inc.Delta == 0 {
		c.Flags.Or(cells.Reseed) // sent even without an increment
	}
	r.QueueReplay(w, c, inc.Delta)
}

// Queued returns how many cells and windows wait for the loop.
func (r *Tier) Queued() int {
	if r == nil {
		return 0
	}
	replays, refreshes := r.Pending()
	return replays + refreshes
}

// Prepare brings w up to date before a decision at now (see prepareWindow).
func (r *Tier) Prepare(ctx context.Context, w *cells.Window, now int64) {
	if r != nil {
		r.prepareWindow(ctx, w, now)
	}
}

// PrepareBatch brings the windows of a batch up to date before a decision
// at now (see prepareBatchWindows).
func (r *Tier) PrepareBatch(ctx context.Context, ws []*cells.Window, now int64) {
	if r != nil {
		r.prepareBatchWindows(ctx, ws, now)
	}
}

// AfterDecide does the regional tier's share of a decision on w at now,
// which counted counted into cur, admitted or not, and left remaining of
// capacity (see afterDecideWindow).
func (r *Tier) AfterDecide(w *cells.Window, cur *cells.Cell, now, counted int64, admitted bool, remaining, capacity int64) {
	if r != nil {
		r.afterDecideWindow(w, cur, now, counted, admitted, remaining, capacity)
	}
}

// Operations on the regional store, as metric labels.
const (
	OpCold        = "cold"     // hydrate a cell this process has not seen
	OpAged        = "aged"     // re-read a window whose copy is older than MaxCopyAge
	OpStrict      = "strict"   // refresh a strict window before deciding
	OpRefund      = "refund"   // read a window before giving back to it
	OpStale       = "stale"    // refresh a warm window in the background
	OpReplay      = "replay"   // add accepted increments
	ResultOK      = "ok"       // the store answered for every cell
	ResultPartial = "partial"  // the store answered for some cells only
	ResultErr     = "error"    // the store failed or timed out
	resultRej     = "rejected" // the store's breaker is open: nothing was sent
)

// call runs call with a timeout and records the operation's outcome
// and latency: ok, partial (some cells failed), rejected (the store knew
// its server was down and sent nothing) or error.
func (r *Tier) call(ctx context.Context, op string, timeout time.Duration, call func(context.Context) ([]int64, error)) ([]int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	start := time.Now()
	counts, err := call(ctx)
	switch {
	case err == nil:
		r.metrics.Ops.WithLabelValues(op, ResultOK).Inc()
	case isPartial(err):
		r.metrics.Ops.WithLabelValues(op, ResultPartial).Inc()
	case errors.Is(err, store.ErrUnavailable):
		r.metrics.Ops.WithLabelValues(op, resultRej).Inc()
		return counts, err // nothing was sent: no latency to record
	default:
		r.metrics.Ops.WithLabelValues(op, ResultErr).Inc()
	}
	r.metrics.Latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	return counts, err
}

// isPartial reports whether err says that the store answered for some
// cells only. errors.As makes its target escape; kept out of line, that
// allocation happens here, on an error, and not in every call of the
// callers (a cold, aged or strict read on the request path).
//
//go:noinline
func isPartial(err error) bool {
	var partial *store.PartialError
	return errors.As(err, &partial)
}

// prepareWindow brings w up to date with the regional store before a decision
// at now, as far as the decision may wait for it: a cold cell waits for one
// read (shared by every request on it), a strict window refreshes at most once
// per StrictRefresh(w), a window whose last read is older than MaxCopyAge
// is read again as a cold one is, and a warm window whose last read is older
// than FreshnessInterval is refreshed in the background while this request
// decides from memory.
func (r *Tier) prepareWindow(ctx context.Context, w *cells.Window, now int64) {
	cur, _ := w.CellAt(w.SeqOf(now), false)
	if cur == nil {
		return // a stale clock reading: decide handles it
	}
	flags := cur.Flags.Load()
	last := w.RefreshedAt.Load()
	switch {
	case flags&cells.Hydrated == 0:
		r.hydrate(ctx, w, cur, OpCold)
	case now < w.StrictUntil.Load():
		if now-last >= StrictRefresh(w) && w.RefreshedAt.CompareAndSwap(last, now) {
			r.refreshNow(ctx, []*cells.Window{w}, now, OpStrict)
		}
	case now-last >= MaxCopyAge.Milliseconds():
		// The copy is too old to decide from: make the cell cold again, so
		// that this request and any that race it wait for one read.
		if w.RefreshedAt.CompareAndSwap(last, now) {
			cur.Flags.And(^cells.Hydrated)
		}
		r.hydrate(ctx, w, cur, OpAged)
	case now-last >= FreshnessInterval.Milliseconds():
		if w.RefreshedAt.CompareAndSwap(last, now) {
			r.QueueRefresh(w)
		}
	}
}

// ReadNow brings w's cells of now and the one before, and their refunds,
// up to date from the regional store at now, whatever its copy's age: a
// give-back that must not pass what the cell holds reads it first.
func (r *Tier) ReadNow(ctx context.Context, w *cells.Window, now int64) {
	if r != nil {
		r.refreshNow(ctx, []*cells.Window{w}, now, OpRefund)
	}
}

// prepareBatchWindows is prepareWindow for the windows of a batch: every cold
// or strict window is read in one round trip.
func (r *Tier) prepareBatchWindows(ctx context.Context, ws []*cells.Window, now int64) {
	var toRead []*cells.Window
	op := OpStrict
	for _, w := range ws {
		cur, _ := w.CellAt(w.SeqOf(now), false)
		if cur == nil {
			continue
		}
		flags := cur.Flags.Load()
		last := w.RefreshedAt.Load()
		switch {
		case flags&cells.Hydrated == 0:
			w.RefreshedAt.Store(now)
			toRead = append(toRead, w)
			op = OpCold
		case now < w.StrictUntil.Load():
			if now-last >= StrictRefresh(w) && w.RefreshedAt.CompareAndSwap(last, now) {
				toRead = append(toRead, w)
			}
		case now-last >= MaxCopyAge.Milliseconds():
			if w.RefreshedAt.CompareAndSwap(last, now) {
				toRead = append(toRead, w)
				if op == OpStrict {
					op = OpAged
				}
			}
		case now-last >= FreshnessInterval.Milliseconds():
			if w.RefreshedAt.CompareAndSwap(last, now) {
				r.QueueRefresh(w)
			}
		}
	}
	if len(toRead) > 0 {
		r.refreshNow(ctx, toRead, now, op)
	}
}

// hydrate reads a cold cell and its predecessor from the regional store, once:
// every request that arrives while the read is under way waits for it (at most
// store.RequestTimeout) instead of asking again. op names the read in the
// metrics.
func (r *Tier) hydrate(ctx context.Context, w *cells.Window, cur *cells.Cell, op string) {
	var buf [24]byte
	key := string(strconv.AppendUint(buf[:0], uint64(uintptr(unsafe.Pointer(cur))), 36))
	r.flight.Do(key, func() (any, error) {
		if cur.Flags.Load()&cells.Hydrated == 0 {
			w.RefreshedAt.Store(r.clock.Now().UnixMilli())
			r.refreshNow(ctx, []*cells.Window{w}, w.StartOf(cur.Seq()), op)
		}
		return nil, nil
	})
}

// refreshNow is refresh on the request path: bounded by store.RequestTimeout, and
// a window that could not be read is handed to the background loop to retry.
// The current cells count as hydrated afterwards even if the read failed:
// requests then decide from memory instead of waiting again.
func (r *Tier) refreshNow(ctx context.Context, ws []*cells.Window, now int64, op string) {
	for _, w := range r.refresh(ctx, ws, now, op, store.RequestTimeout) {
		r.QueueRefresh(w)
	}
	for _, w := range ws {
		if cur, _ := w.CellAt(w.SeqOf(now), false); cur != nil {
			cur.Flags.Or(cells.Hydrated)
		}
	}
}

// refresh reads the current and previous cells of ws at now from the regional
// store in one round trip, and the next cell of a window that may book
// into it (see cells.Window.BooksAhead: what other processes booked into
// it counts in their decisions), merges what it read, and returns the windows it
// could not read (all of them if the store failed, those of a server that is
// down if it answered in part).
func (r *Tier) refresh(ctx context.Context, ws []*cells.Window, now int64, op string, timeout time.Duration) (failed []*cells.Window) {
	keys := make([]store.CellKey, 0, 3*len(ws))
	for _, w := range ws {
		seq := w.SeqOf(now)
		keys = append(keys, w.CellKey(seq), w.CellKey(seq-1))
	}
	aheadAt := len(keys)
	for _, w := range ws {
		if w.BooksAhead() {
			keys = append(keys, w.CellKey(w.SeqOf(now)+1))
		}
	}
	// The refunds of reserved cells are read in the same round trip.
	refundsAt := len(keys)
	refunds := r.refundsToRead(ws, now)
	for _, rr := range refunds {
		seq, _, _ := rr.key.Period.At(now)
		keys = append(keys, rr.key.CellKey(seq), rr.key.CellKey(seq-1))
	}
	counts, err := r.call(ctx, op, timeout, func(ctx context.Context) ([]int64, error) {
		return r.store.Load(ctx, keys)
	})
	if err != nil && !isPartial(err) || len(counts) != len(keys) {
		return ws
	}
	ahead := counts[aheadAt:refundsAt]
	for i, w := range ws {
		cur, prev := counts[2*i], counts[2*i+1]
		var next int64
		books := w.BooksAhead()
		if books {
			next, ahead = ahead[0], ahead[1:]
		}
		if cur < 0 || prev < 0 || next < 0 {
			failed = append(failed, w)
			continue
		}
		seq := w.SeqOf(now)
		r.merge(w, seq, cur)
		r.merge(w, seq-1, prev)
		if books {
			if c := w.AheadForMerge(seq+1, next); c != nil {
				r.mergeInto(w, c, next)
			}
		}
		if c, _ := w.CellAt(seq, false); c != nil {
			c.Flags.Or(cells.Hydrated)
		}
	}
	counts = counts[refundsAt:]
	for i, rr := range refunds {
		cur, prev := counts[2*i], counts[2*i+1]
		rw := rr.w
		if rw == nil {
			if cur <= 0 && prev <= 0 {
				continue // nothing given back, and nothing held to merge into
			}
			var err error
			if rw, _, err = r.table.FindOrCreate(&rr.key); err != nil {
				continue
			}
			rw.ObserveLimit(rr.limit)
		}
		seq := rw.SeqOf(now)
		if cur >= 0 {
			r.merge(rw, seq, cur)
		}
		if prev >= 0 {
			r.merge(rw, seq-1, prev)
		}
	}
	return failed
}

// refundsRead is a refunds window a read fetches: its key, the window if
// the table holds it (one the read finds something for is made then),
// and the limit of the window whose refunds it holds.
type refundsRead struct {
	key   cells.Key
	w     *cells.Window
	limit int64
}

// refundsToRead returns the refunds windows of those of ws whose current or
// previous cell at now is reserved (see cells.Reserved): what other
// processes gave back of those cells is in the regional store. A token
// bucket's window has two: its refunds, which carry its seed, and the
// tokens given back to it (see cells.Window.GivenKey). They are merged
// after the windows' own cells, so that a bucket takes what was admitted
// before it takes back what was given of it. A refunds window the table
// does not hold is made only if the store holds something for it: most
// buckets are never given back to.
func (r *Tier) refundsToRead(ws []*cells.Window, now int64) []refundsRead {
	var out []refundsRead
	for _, w := range ws {
		seq := w.SeqOf(now)
		reserved := false
		for i := range w.Cells {
			if c := w.Cells[i].Load(); c != nil && c.Seq() >= seq-1 && c.Flags.Load()&cells.Reserved != 0 {
				reserved = true
			}
		}
		if !reserved {
			continue
		}
		ks, n := [2]cells.Key{w.RefundsKey()}, 1
		if w.Period().Kind() == period.Bucket {
			ks[1], n = w.GivenKey(), 2
		}
		limit := w.Limit.Load()
		for _, k := range ks[:n] {
			rw := r.table.Find(&k)
			if rw != nil {
				rw.ObserveLimit(limit)
			}
			out = append(out, refundsRead{key: k, w: rw, limit: limit})
		}
	}
	return out
}

// merge raises w's cell of seq to what the regional store holds plus what
// this process has not sent it yet. The store's count includes everything this
// process already replayed; what is still unreplayed or speculative is only
// here. A store that holds less than it showed this process before (it lost
// its data: a Redis restarted without persistence, a cluster master back
// empty) is re-seeded with that by the next replay (see cells.Cell.Stored). A cell
// the process has no slot for any more is left alone.
func (r *Tier) merge(w *cells.Window, seq, stored int64) {
	if c := w.CellForMerge(seq, stored); c != nil {
		r.mergeInto(w, c, stored)
	}
}

// mergeInto is merge for c, the cell of w the store's count stored is of.
func (r *Tier) mergeInto(w *cells.Window, c *cells.Cell, stored int64) {
	n := stored + c.Unreplayed.Load() + c.Speculative.Load()
	r.models.Raise(w, c, &c.Count, n, r.clock.Now().UnixMilli())
	if stored < c.Stored.Load() {
		c.Flags.Or(cells.Reseed)
		r.QueueReplay(w, c, 0)
		return
	}
	cells.AtomicMax(&c.Stored, stored)
}

// afterDecideWindow does the regional tier's share of a decision on w at now:
// it queues what was counted for replay and keeps the key strict for one
// duration after a denial, or after an admission that left at most
// strictHeadroom of its capacity (a window's limit, a bucket's burst).
// Near the limit is where processes that are each
// one admission behind the others would together admit too much; strict
// decisions read the store first.
func (r *Tier) afterDecideWindow(w *cells.Window, cur *cells.Cell, now, counted int64, admitted bool, remaining, capacity int64) {
	if counted > 0 {
		r.QueueReplay(w, cur, counted)
	}
	if admitted && float64(remaining) > strictHeadroom*float64(capacity) {
		return
	}
	r.MakeStrict(w, now)
}

// MakeStrict keeps w strict for one duration from now: its decisions read
// the store first (at most once per StrictRefresh).
func (r *Tier) MakeStrict(w *cells.Window, now int64) {
	until := now + w.StrictSpan(now)
	for {
		old := w.StrictUntil.Load()
		if until <= old {
			return
		}
		if w.StrictUntil.CompareAndSwap(old, until) {
			if old <= now {
				r.metrics.StrictActivations.Inc()
			}
			return
		}
	}
}

// QueueReplay records that cost (0 for a cell to re-seed) was accepted into
// c and, if c is not queued yet, queues it for the next replay.
func (r *Tier) QueueReplay(w *cells.Window, c *cells.Cell, cost int64) {
	c.Unreplayed.Add(cost)
	flags := c.Flags.Load()
	if flags&cells.Queued != 0 {
		return
	}
	if old := c.Flags.Or(cells.Queued); old&cells.Queued != 0 {
		return
	}
	if !r.replays.Push(cells.Ref{W: w, C: c}) {
		// The cell stays unreplayed and unqueued: its next accepted request
		// queues it again.
		c.Flags.And(^cells.Queued)
		r.metrics.ReplayOverflow.Inc()
	}
}

// QueueRefresh queues w for a background read from the regional store.
func (r *Tier) QueueRefresh(w *cells.Window) {
	if !r.refreshes.Push(w) {
		r.metrics.RefreshOverflow.Inc()
	}
}

// StrictRefresh returns how many ms a strict window waits between regional
// reads: StrictRefreshInterval, or a hundredth of the window for windows
// under 10 s, so that short windows converge within a small share of their
// length.
func StrictRefresh(w *cells.Window) int64 {
	return min(StrictRefreshInterval.Milliseconds(), w.Period().Ms()/100)
}

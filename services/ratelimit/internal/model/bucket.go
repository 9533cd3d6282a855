package model

import (
	"context"
	"math"
	"math/big"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/regional"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// A token bucket is decided as the generic cell rate algorithm (GCRA)
// decides it, in one process exactly: its state is one instant, tat (the
// theoretical arrival time), by which every token taken so far will have
// been refilled. With T = duration/limit the time one token takes to
// refill and τ = burst·T:
//
//	base      = max(tat, now)
//	admitted  = cost <= burst && base + cost·T - now <= τ
//	tat       = base + cost·T      (on admission)
//	remaining = floor((τ - (base - now)) / T)
//	reset     = base               (when the bucket is full again)
//
// What the stores share is what every model shares, the admitted cost of
// each fixed period of the key (the window's cells; a bucket's last a
// power of two of ms that holds its burst's refill, see BucketShift), so
// that a bucket's state converges through the same grow-only counts: a
// count the process did not admit itself (another process's, raised by a
// read of the regional store or a replay's answer, or another region's,
// imported by the global tier) is taken from the bucket where the tier
// raises the cell, as if it arrived then (or, for an earlier cell's, at
// that cell's end); a bucket made for a window that already holds counts
// starts with them taken. Seeing a count late makes the bucket emptier
// than it was, never fuller: what it gets wrong the other way is what the
// processes admit between two reads of each other, as with every model.
// What is counted whatever the verdict takes it at most one burst past
// empty (maxDebt). Tokens given back (a refund: Envoy's negative hits)
// are counted as the admissions are, in a grow-only count of their own
// beside the cells (see cells.Window.GivenKey): each process gives its
// bucket back what that count grew by since it last did, once however
// often it sees it, never past full (see GiveTokens and SettleGiven).
//
// A bucket is one state per identity (workspace, namespace, identifier):
// its rate, burst and unit are parameters, not identity. A decision with
// other parameters than the last converts the state so that the bucket
// keeps its tokens, as x/time/rate's SetLimitAt and SetBurstAt do (see
// rescale). A change that moves the bucket's memory past a power of two
// counts it in cells of another length: a window of their own that shares
// the identity's one bucket, and whose first decision in a process reads
// what the new cells hold first (see Table.bucketFor). What a process
// that reads a bucket cold cannot learn from counts (what the bucket owed
// before its cells changed length, that a raised burst did not refill it)
// each change leaves beside the cells as a seed (see Table.seedBucket).

// tokenBucket is the model of a token bucket: the window's bucket (see
// bucketFor), made before the regional store's read (Prepare), decides
// (Count); an admission is counted into the window's current cell as
// every model's is, and its tokens are what a take back returns.
type tokenBucket struct{}

// Prepare is Model.Prepare for a token bucket: w's bucket, converted to
// sp (see bucketFor).
func (*tokenBucket) Prepare(ctx context.Context, t *Table, w *cells.Window, sp Spec, now int64) *Bucket {
	return t.bucketFor(ctx, w, sp, now)
}

// TakeBack is Model.TakeBack for a token bucket: the tokens cost took go
// back to w's bucket.
func (*tokenBucket) TakeBack(t *Table, w *cells.Window, c *cells.Cell, sp Spec, cost int64) {
	t.returnTokens(w, c, sp, cost)
}

// Bucket is a token bucket's state beside its windows' cells: made for
// the first token bucket decision on an identity and held in Table's
// maps beside the windows (see Table.bucketOf), so that windows of the
// other models stay in the 80-byte size class.
type Bucket struct {
	// tat is the theoretical arrival time, unix ns.
	tat atomic.Int64
	// limit per durMs is the refill rate the latest decision gave, and
	// burst its capacity: what tat is measured in, what counts seen
	// elsewhere are taken at, and what bounds the bucket's debt.
	limit, durMs, burst atomic.Int64
	// mu serializes changes of the parameters, which convert tat, and
	// give-backs (GiveTokens, settle), which keep settled.
	mu sync.Mutex
	// refs counts the windows that hold the bucket (one per cell length
	// its parameters chose): the table forgets the bucket with the last.
	refs atomic.Int64
	// windows are those windows, under mu: a decision on one keeps the
	// others fresh (see Table.refreshSiblings).
	windows []*cells.Window
	// settled is, under mu, for each cell of tokens given back to the
	// bucket that counts now (see Table.SettleGiven), how much of it the
	// bucket took back: what a count of it seen again gives only the
	// growth of, however often it is seen (a read, a replay's answer, a
	// sync, a window the janitor removed and a read made again).
	settled []settledCell
	// settledAt is the latest instant a give-back brought, unix ms, under
	// mu: what settled forgets cells by.
	settledAt int64
}

// settledCell is how much of one cell of tokens given back a bucket took
// back: the cell's code and sequence, and the total.
type settledCell struct {
	code, seq, n int64
}

// init sets b's parameters to sp's, for a new bucket.
func (b *Bucket) init(sp Spec) {
	b.limit.Store(sp.Limit)
	b.durMs.Store(sp.DurationMs)
	b.burst.Store(sp.Burst)
}

// observe makes sp's rate and burst b's, at now (unix ns), and reports
// whether they changed: a bucket whose parameters change keeps its tokens
// (see rescale). Decisions with the same parameters as the last pay three
// loads.
func (b *Bucket) observe(sp Spec, now int64) bool {
	if b.limit.Load() == sp.Limit && b.durMs.Load() == sp.DurationMs && b.burst.Load() == sp.Burst {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old := Spec{Limit: b.limit.Load(), DurationMs: b.durMs.Load(), Burst: b.burst.Load()}
	if old.Limit == sp.Limit && old.DurationMs == sp.DurationMs && old.Burst == sp.Burst {
		return false
	}
	for {
		tat := b.tat.Load()
		if b.tat.CompareAndSwap(tat, rescale(tat, now, old, sp)) {
			break
		}
	}
	b.limit.Store(sp.Limit)
	b.durMs.Store(sp.DurationMs)
	b.burst.Store(sp.Burst)
	return true
}

// rescale returns the instant of a bucket that holds tat at now (unix ns)
// under the parameters from, converted to those of to so that the bucket
// keeps its tokens, as x/time/rate's SetLimitAt and SetBurstAt do: what it
// owed in tokens it still owes (refilling at the new rate from now on), a
// larger burst adds what it adds to what is owed (the new room fills as
// the old did), and a smaller one takes what it takes off it, never
// past full. Rounded up to the ns: a conversion errs strict.
func rescale(tat, now int64, from, to Spec) int64 {
	ns := int64(time.Millisecond)
	// Owed tokens, over the ns a token of to takes: (tat-now)·from.Limit /
	// (from.DurationMs·ns) + to.Burst - from.Burst, as one fraction.
	owed := new(big.Int).Mul(big.NewInt(max(tat-now, 0)), big.NewInt(from.Limit))
	owed.Mul(owed, big.NewInt(to.DurationMs*ns))
	den := big.NewInt(from.DurationMs * ns)
	grown := new(big.Int).Mul(big.NewInt(to.Burst-from.Burst), den)
	grown.Mul(grown, big.NewInt(to.DurationMs*ns))
	owed.Add(owed, grown)
	if owed.Sign() <= 0 {
		return now
	}
	den.Mul(den, big.NewInt(to.Limit))
	q, r := owed.QuoRem(owed, den, new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	bound := debtBound(to.Limit, to.DurationMs, to.Burst)
	if !q.IsInt64() || q.Int64() > bound {
		return now + bound
	}
	return now + q.Int64()
}

// maxDebt bounds how far past empty what a bucket counts whatever the
// verdict (reports, Envoy's hits over the limit, and what other processes
// and regions admitted) takes it: one more burst, whose refill it then
// owes. Without a bound a client hammering an empty bucket with counted
// hits would lock itself out for as long as it hammered, and the instant
// would at last overflow; a window forgets everything after two durations.
func maxDebt(tau int64) int64 { return 2 * tau }

// debtBound returns, in ns, how far past now a bucket of limit per durMs
// and burst may owe: maxDebt of its burst's refill.
func debtBound(limit, durMs, burst int64) int64 {
	return maxDebt(refill(max(burst, 1), limit, durMs))
}

// BucketShift returns the exponent of the length of a token bucket's cells
// for a rate of limit per durMs and a burst: the least power of two of ms
// longer than the time the whole burst takes to refill, from
// store.MinBucketShift to store.MaxBucketShift (past the longest window).
// The two cells a window keeps then span the bucket's whole memory, so
// that a process that reads them cold (a new process, another region's
// first request) knows every admission the bucket still owes refill for;
// and a power of two names the same cells for every rate and burst within
// a factor of two, so that most changes of them keep the bucket's cells.
func BucketShift(limit, durMs, burst int64) int64 {
	full := uint64(durMs) // the common case, burst = limit, without a division
	if burst != limit {
		full = mulDiv(uint64(burst), uint64(durMs), uint64(limit)) // ms, rounded down: the length is longer
	}
	return min(max(int64(bits.Len64(full)), store.MinBucketShift), store.MaxBucketShift)
}

// full reports whether b holds its whole burst at now (unix ms): every
// token it gave has refilled, so forgetting it loses nothing.
func (b *Bucket) full(now int64) bool { return b.tat.Load() <= now*int64(time.Millisecond) }

// take takes n units admitted elsewhere from b, at the rate and burst it
// last observed, as if they arrived at at (unix ns), at most to its debt's
// bound.
func (b *Bucket) take(n, at int64) {
	limit, durMs, burst := b.limit.Load(), b.durMs.Load(), b.burst.Load()
	if n <= 0 || limit <= 0 || durMs <= 0 {
		return
	}
	need := refill(n, limit, durMs)
	bound := at + debtBound(limit, durMs, burst)
	for {
		tat := b.tat.Load()
		next := min(max(tat, at)+need, max(bound, tat))
		if next == tat || b.tat.CompareAndSwap(tat, next) {
			return
		}
	}
}

// refill returns, in ns, how long cost tokens of a bucket of limit per dur
// ms take to refill, rounded up (the bucket errs strict by under a ns a
// request).
func refill(cost, limit, durMs int64) int64 {
	hi, lo := bits.Mul64(uint64(cost), uint64(durMs)*uint64(time.Millisecond))
	if hi >= uint64(limit) {
		return math.MaxInt64 / 8
	}
	q, r := bits.Div64(hi, lo, uint64(limit))
	if r != 0 {
		q++
	}
	// Bounded so that an instant, now and a few of these always fit.
	return int64(min(q, math.MaxInt64/8))
}

// RefillMs returns how many ms a bucket that refills limit per durMs
// takes to refill n tokens, rounded up.
func RefillMs(n, limit, durMs int64) uint64 {
	ms := mulDiv(uint64(n), uint64(durMs), uint64(limit)) // rounded down
	phi, plo := bits.Mul64(uint64(n), uint64(durMs))
	if qhi, qlo := bits.Mul64(ms, uint64(limit)); qhi != phi || qlo != plo {
		ms++ // rounded up
	}
	return ms
}

// tokensIn returns how many whole tokens refill in ns.
func tokensIn(ns, limit, durMs int64) int64 {
	if ns <= 0 {
		return 0
	}
	return int64(mulDiv(uint64(ns), uint64(limit), uint64(durMs)*uint64(time.Millisecond)))
}

// Count is Model.Count for a token bucket: it decides a request of cost
// against b, the token bucket sp of w (converted to sp by bucketFor), at
// now (unix ms), counting an admission into w's current cell.
func (*tokenBucket) Count(t *Table, w *cells.Window, b *Bucket, now int64, sp Spec, cost int64, report, speculative bool) (Decision, *cells.Cell, bool) {
	cur, _, _, _, now := w.CellsOf(now, t.Regional == nil)
	nowNs := now * int64(time.Millisecond)
	tau := refill(sp.Burst, sp.Limit, sp.DurationMs)
	need := refill(cost, sp.Limit, sp.DurationMs)
	d := Decision{Limit: sp.Limit, Capacity: sp.Burst}
	// As a window's count (see cells.Contention): after cells.FastCASAttempts lost
	// races, or on a contended cell, under the key's lock.
	var held *sync.Mutex
	if cur.Flags.Load()&cells.Contended != 0 {
		held = t.Contention.Lock(cur)
	}
	for attempt := 0; ; attempt++ {
		tat := b.tat.Load()
		base := max(tat, nowNs)
		next := base + need
		if report {
			// Counted whatever the verdict, up to the debt's bound.
			next = min(next, max(nowNs+maxDebt(tau), base))
		}
		fits := cost <= sp.Burst && next-nowNs <= tau
		// A booking: tokens taken ahead, on the refill's schedule, at most
		// one burst's refill ahead, within what every process's view of
		// a bucket's debt holds (maxDebt).
		booked := !fits && !report && cost > 0 && cost <= sp.Burst && sp.MaxWaitMs > 0 &&
			next-nowNs <= tau+min(sp.MaxWaitMs*int64(time.Millisecond), tau)
		if !fits && !report && !booked {
			d.Remaining = min(tokensIn(tau-(base-nowNs), sp.Limit, sp.DurationMs), sp.Burst)
			d.ResetMs = ceilMs(base)
			if cost <= sp.Burst {
				d.RetryAfter = ceilMs(next-tau) - now
			}
			cells.Unlock(held, cur)
			return d, cur, false
		}
		if cost == 0 {
			d.Success = true
			d.Remaining = min(tokensIn(tau-(base-nowNs), sp.Limit, sp.DurationMs), sp.Burst)
			d.ResetMs = ceilMs(base)
			cells.Unlock(held, cur)
			return d, cur, false
		}
		if t.BeforeCAS != nil {
			t.BeforeCAS(w, cur, attempt)
		}
		if !b.tat.CompareAndSwap(tat, next) {
			held = t.Contention.AfterLost(held, cur, attempt)
			continue
		}
		cells.Unlock(held, cur)
		if speculative {
			w.BeginTransition()
			cur.Speculative.Add(cost)
			cur.Count.Add(cost)
			w.EndTransition()
		} else if report {
			cells.AddCapped(&cur.Count, cost)
		} else {
			cur.Count.Add(cost)
		}
		d.Success = fits || booked
		d.Remaining = max(0, min(tokensIn(tau-(next-nowNs), sp.Limit, sp.DurationMs), sp.Burst))
		d.ResetMs = ceilMs(next)
		if booked {
			// When the refill covers it: when the bucket, emptied of
			// everything booked before it, would have admitted it.
			d.WaitMs = max(ceilMs(next-tau)-now, 1)
		}
		if !fits && !booked && cost <= sp.Burst {
			// A report past the burst: when a request of the same cost
			// would pass (Envoy's next hit, counted over the limit as
			// this one was); none helps one above the burst.
			d.RetryAfter = max(ceilMs(next+need-tau)-now, 0)
		}
		return d, cur, true
	}
}

// ceilMs is unix ns in unix ms, rounded up.
func ceilMs(ns int64) int64 {
	ms := ns / int64(time.Millisecond)
	if ns%int64(time.Millisecond) > 0 {
		ms++
	}
	return ms
}

// returnTokens gives w's bucket back the cost tokens an admission into c
// took, of a request decided by sp. The count is the caller's to take
// back.
func (t *Table) returnTokens(w *cells.Window, c *cells.Cell, sp Spec, cost int64) {
	if b, ok := t.buckets.Load(w); ok {
		b.tat.Add(-refill(cost, sp.Limit, sp.DurationMs))
	}
}

// GiveTokens gives up to cost tokens back to w's bucket at now (unix ms),
// never past full, counts them into gc, the cell of w's given tokens (see
// cells.Window.GivenKey) of now, and returns how many it gave (a part of
// a token owed counts as one). What gc counts reaches the other processes
// and regions, which take as many back from their buckets (see
// SettleGiven); this bucket has them back already.
func (t *Table) GiveTokens(w, gw *cells.Window, gc *cells.Cell, cost, now int64) int64 {
	b, ok := t.buckets.Load(w)
	if !ok || cost <= 0 {
		return 0
	}
	nowNs := now * int64(time.Millisecond)
	b.mu.Lock()
	defer b.mu.Unlock()
	var give int64
	for {
		limit, durMs := b.limit.Load(), b.durMs.Load()
		tat := b.tat.Load()
		if tat <= nowNs {
			return 0 // full
		}
		one := refill(1, limit, durMs)
		give = min(cost, (tat-nowNs+one-1)/one)
		if b.tat.CompareAndSwap(tat, max(tat-refill(give, limit, durMs), nowNs)) {
			break
		}
	}
	cells.AddCapped(&gc.Count, give)
	s := b.settledOf(gw.Period().Code(), gc.Seq(), now)
	s.n += give
	return give
}

// SettleGiven gives the bucket of gw's identity back what c, a cell of
// the tokens given back to it, holds (this region's count and the other
// regions') past what the bucket took back of it already, at now (unix
// ms), never past full: the growth of what other processes and regions
// gave back, seen by a read, a replay's answer or a sync, or what the
// cells held when the bucket was made. Seen again, a count gives
// nothing: a give-back replayed after a timeout, or read twice, is taken
// back once. The tiers call it through Raise; a refund whose count moved
// to another window of the cell calls it itself.
func (t *Table) SettleGiven(gw *cells.Window, c *cells.Cell, now int64) {
	k := gw.Key()
	b, ok := t.bucketIDs.Load(bucketID{k.Workspace, k.Namespace, k.Identifier})
	if !ok {
		return // no bucket: one made reads the cells (see bucketOf)
	}
	b.settle(gw.Period().Code(), c, now)
}

// settle takes back into b what c, a cell of given tokens named by code,
// holds past what b took back of it, at now (unix ms). A bucket not yet
// given to a window (bucketOf has not taken its cells' counts) takes
// nothing: bucketOf settles after it takes.
func (b *Bucket) settle(code int64, c *cells.Cell, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.windows) == 0 {
		return
	}
	now = max(now, b.settledAt)
	if c.Seq() < now/store.CellLength(code)-1 {
		return // given back of tokens the bucket has refilled since
	}
	s := b.settledOf(code, c.Seq(), now)
	total := c.Count.Load() + c.Global.Load()
	if total <= s.n {
		return
	}
	b.give(total-s.n, now*int64(time.Millisecond))
	s.n = total
}

// settledOf returns what b took back of the given tokens of cell seq of
// code, under b.mu, made on first use. Cells that count no more are
// forgotten, by the latest now (unix ms) any caller brought: a caller
// whose now is older (a sync or a replay that read the clock before its
// round trip) must not take a forgotten cell for a new one, whose whole
// count it would give back again (settle refuses those cells by the same
// instant).
func (b *Bucket) settledOf(code, seq, now int64) *settledCell {
	b.settledAt = max(b.settledAt, now)
	b.settled = slices.DeleteFunc(b.settled, func(s settledCell) bool {
		return s.seq < b.settledAt/store.CellLength(s.code)-1
	})
	for i := range b.settled {
		if s := &b.settled[i]; s.code == code && s.seq == seq {
			return s
		}
	}
	b.settled = append(b.settled, settledCell{code: code, seq: seq})
	return &b.settled[len(b.settled)-1]
}

// give gives n tokens back to b at at (unix ns), at the rate it last
// observed, never past full.
func (b *Bucket) give(n, at int64) {
	limit, durMs := b.limit.Load(), b.durMs.Load()
	if n <= 0 || limit <= 0 || durMs <= 0 {
		return
	}
	back := refill(n, limit, durMs)
	for {
		tat := b.tat.Load()
		next := max(tat-back, at)
		if next >= tat || b.tat.CompareAndSwap(tat, next) {
			return
		}
	}
}

// Raise raises v, a count of c (its own or the other regions'), a cell of
// w, to n at now (unix ms), as a tier does with what it saw counted
// elsewhere: what the raise added is taken from w's bucket, if w has one
// (see the comment at the top of this file). Only a tier raises a count
// so, never a decision's own increment.
func (t *Table) Raise(w *cells.Window, c *cells.Cell, v *atomic.Int64, n, now int64) {
	old, raised := cells.RaiseTo(v, n)
	if !raised || t.buckets.Size() == 0 {
		return
	}
	switch b, ok := t.buckets.Load(w); {
	case ok:
		b.take(n-old, arrival(w, c, now))
	case w.HoldsRefunds() && w.Period().Kind() == period.Bucket:
		t.applySeed(w, n, now)
	case w.Period().Kind() == period.Given:
		t.SettleGiven(w, c, now)
	}
}

// applySeed makes the bucket of the window whose seeds rw holds owe at
// least seed tokens at now (unix ms), when a tier first sees it raised:
// another process left it with what it owed (see Table.seedBucket), a
// moment ago, which this one may not know (it made its bucket before the
// seed reached the store). Taken as the larger, never on top: a seed
// tells how much was owed, not what was admitted.
func (t *Table) applySeed(rw *cells.Window, seed, now int64) {
	k := rw.Key().Owner()
	w := t.Find(&k)
	if w == nil {
		return
	}
	b, ok := t.buckets.Load(w)
	if !ok {
		return
	}
	limit, durMs, burst := b.limit.Load(), b.durMs.Load(), b.burst.Load()
	at := now * int64(time.Millisecond)
	cells.AtomicMax(&b.tat, at+min(refill(seed, limit, durMs), debtBound(limit, durMs, burst)))
}

// arrival is when counts of c, a cell of w, first seen at now (unix ms)
// are taken to have arrived, unix ns: now for the current cell, and an
// earlier cell's end, the latest instant they can have arrived, for it.
func arrival(w *cells.Window, c *cells.Cell, now int64) int64 {
	at := now
	if c.Seq() < w.SeqOf(now) {
		at = min(now, w.StartOf(c.Seq()+1))
	}
	return at * int64(time.Millisecond)
}

// bucketFor returns w's bucket for a decision by sp at now (unix ms): the
// one of w's identity (see Table.bucketOf), converted to sp's
// parameters (see Bucket.observe). A window that holds no bucket yet (the
// identity's first decision in this process, or its first in cells of this
// length) reads the regional store first, so that the bucket takes what
// the cells and their seed hold in one step, and reads it again a strict
// window's interval later. A change of parameters, or of
// cell length, leaves a seed (see seedBucket); a bucket whose identity has
// windows of other lengths keeps those fresh (see refreshSiblings).
func (t *Table) bucketFor(ctx context.Context, w *cells.Window, sp Spec, now int64) *Bucket {
	b, ok := t.buckets.Load(w)
	if !ok {
		t.Regional.Prepare(ctx, w, now)
		var attached bool
		b, attached = t.bucketOf(w, sp, now)
		if attached {
			defer t.seedBucket(w, b, sp, now)
		}
		// w's next read comes a strict window's interval from now, not
		// regional.FreshnessInterval: a process that moved to these cells at the
		// same moment leaves its seed a replay later, which this read
		// did not see.
		w.RefreshedAt.Store(now - regional.FreshnessInterval.Milliseconds() + regional.StrictRefresh(w))
	}
	if b.observe(sp, now*int64(time.Millisecond)) {
		t.seedBucket(w, b, sp, now)
	}
	if b.refs.Load() > 1 && t.Regional != nil {
		t.refreshSiblings(b, w, now)
	}
	return b
}

// refreshSiblings queues a background read of each window of b but w
// whose cells still count at now (unix ms) and whose last read is older
// than a strict window's interval: what other processes still count in
// the cells of the bucket's other lengths (those that have not moved yet,
// or whose last admissions there were on their way) is taken from the
// bucket as promptly as what they count in w's.
func (t *Table) refreshSiblings(b *Bucket, w *cells.Window, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range b.windows {
		if o == w || o.Idle(o.SeqOf(now)-1) {
			continue
		}
		if last := o.RefreshedAt.Load(); now-last >= regional.StrictRefresh(o) && o.RefreshedAt.CompareAndSwap(last, now) {
			t.Regional.QueueRefresh(o)
		}
	}
}

// seedBucket leaves, beside w's current cell at now (unix ms), what b owes
// at sp's rate in whole tokens rounded up: its seed. Counts tell a process
// that reads the bucket cold (a new process, one whose first decision is
// in cells of this length) what was admitted, not what the bucket owed
// before its parameters changed: that it owed what it counted in cells of
// another length, or that a raised burst did not refill it. Such a
// process takes the seed as owed at once, on top of what the cells count
// (it errs strict, by what refilled since the seed). A process that holds
// the bucket already ignores seeds, which tell it nothing it does not
// know, so that seeds never add up. The seed is kept as the key's refunds
// cell is, which a bucket has no other use for (it takes no
// reservations), and merged as the largest: the regional store keeps the
// larger of two processes' seeds (store.Increment.Floor), the global store
// each region's.
func (t *Table) seedBucket(w *cells.Window, b *Bucket, sp Spec, now int64) {
	owed := owedTokens(b.tat.Load()-now*int64(time.Millisecond), sp.Limit, sp.DurationMs)
	if owed <= 0 {
		return
	}
	k := w.RefundsKey()
	rw, _, err := t.FindOrCreate(&k)
	if err != nil {
		return
	}
	rw.ObserveLimit(sp.Limit)
	rc, _ := rw.CellAt(w.SeqOf(now), true)
	if rc == nil {
		return // the window moved past now meanwhile
	}
	if _, raised := cells.RaiseTo(&rc.Count, owed); !raised {
		return
	}
	if t.Regional != nil {
		cells.AtomicMax(&rc.Stored, owed)
		rc.Flags.Or(cells.Reseed)
		t.Regional.QueueReplay(rw, rc, 0)
	}
	t.Global.NoteRefund(rw, rc)
}

// owedTokens returns how many tokens a bucket of limit per durMs that
// refills in ns owes, rounded up.
func owedTokens(ns, limit, durMs int64) int64 {
	if ns <= 0 {
		return 0
	}
	n := tokensIn(ns, limit, durMs)
	if refill(n, limit, durMs) < ns {
		n++
	}
	return n
}

package penalties

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/penalties/memstore"
	"github.com/unkeyed/ratelimit/services/penalties/store"
)

var (
	traceSeed   = flag.Uint64("trace.seed", 0, "run the random traces from this seed alone (0: a fresh seed, printed)")
	traceBudget = flag.Int("trace.requests", 20_000, "events in each random trace")
)

// refBox is the reference penalty box, written from the rules as the API
// states them, not from the Box's code: a denial of a limit with a
// penalty blocks the identifier for the penalty from that moment; a
// denial within one block's length after a block ended blocks for twice
// that block's length (at least the penalty), never more than the cap; a
// lift ends the block at once and forgets it.
type refBox struct {
	start, end int64 // the latest block, [start, end); end 0: none
}

func (r *refBox) blocked(now int64) bool { return r.end != 0 && r.start <= now && now < r.end }

func (r *refBox) offend(now, penalty, top int64) (start, end int64) {
	length := penalty
	if r.end != 0 && now >= r.end && now < r.end+(r.end-r.start) {
		length = 2 * (r.end - r.start)
		if length < penalty {
			length = penalty
		}
		if length > top {
			length = top
		}
	}
	r.start, r.end = now, now+length
	return r.start, r.end
}

// faultyStore is the store seam with faults: one write in faultEvery is
// lost (not applied, an error), applied with its answer lost (applied,
// an error: the Box writes it again), or applied twice; one poll in
// faultEvery fails.
type faultyStore struct {
	store.Penalties
	rng        *rand.Rand
	faultEvery int
	faults     atomic.Int64
}

func (f *faultyStore) fault() int {
	if f.faultEvery == 0 || f.rng.IntN(f.faultEvery) != 0 {
		return 0
	}
	f.faults.Add(1)
	return 1 + f.rng.IntN(3)
}

func (f *faultyStore) Merge(ctx context.Context, b Block) error {
	switch f.fault() {
	case 1:
		return errDown // lost
	case 2:
		_ = f.Penalties.Merge(ctx, b)
		return errDown // applied, answer lost
	case 3:
		_ = f.Penalties.Merge(ctx, b) // duplicated
	}
	return f.Penalties.Merge(ctx, b)
}

func (f *faultyStore) Changes(ctx context.Context, since, now int64, limit int) ([]Block, int64, error) {
	if f.fault() != 0 {
		return nil, 0, errDown
	}
	return f.Penalties.Changes(ctx, since, now, limit)
}

// traceTopology is a fleet on one store: procs processes in each of
// regions regions; each region's processes write every flushMs and poll
// every pollMs (a region farther from the store, slower).
type traceTopology struct {
	name          string
	regions       int
	procs         int
	faultEvery    int
	flushMs       []int64 // per region
	pollMs        []int64 // per region
	exactAsRefBox bool    // one process, no faults: every answer the reference's
}

// TestPenaltyTraces drives random traces of denials, checks and lifts
// through penalty boxes on one store with faults at its seam, and holds
// them to the reference box: with one process and a store that never
// fails, every block is the reference's, to the millisecond; in a region
// and across regions, with writes lost, applied-then-failed and
// duplicated and polls failed, a block is never shorter than asked where
// it started, every process that polled after the store held it blocks
// the identifier until its end (unless lifted, or superseded by a block a
// process that had not read it started later), one that polled after a
// lift reached the store holds no block that began before it, and every
// block is the penalty doubled a whole number of times, at most the cap.
func TestPenaltyTraces(t *testing.T) {
	seed := *traceSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-trace.seed=%d to replay)", seed, seed)
	for _, topo := range []traceTopology{
		{name: "one process", regions: 1, procs: 1, flushMs: []int64{1}, pollMs: []int64{1000}, exactAsRefBox: true},
		{name: "one process, faults", regions: 1, procs: 1, faultEvery: 5, flushMs: []int64{100}, pollMs: []int64{1000}},
		{name: "a region", regions: 1, procs: 3, faultEvery: 7, flushMs: []int64{100}, pollMs: []int64{1000}},
		{name: "two regions", regions: 2, procs: 2, faultEvery: 7, flushMs: []int64{100, 300}, pollMs: []int64{1000, 1500}},
	} {
		t.Run(topo.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(len(topo.name))))
			checked, started, superseded := runPenaltyTrace(t, rng, topo, *traceBudget)
			t.Logf("%s: %d events, %d blocks started (%d cut short by a shorter one a process that had not read them started later), %d checks against the blocks the store held",
				topo.name, *traceBudget, started, superseded, checked)
		})
	}
}

// tracedBlock is a block some process started, as the trace knows it.
type tracedBlock struct {
	id         string
	start, end int64
	storedAt   int64 // when the store first held it (0: not yet)
	// unaware is set when the process that started it had not read a
	// lift made before: the lift wins over it (the documented bound).
	unaware bool
	// superseded is set when a process that had not read it started a
	// later block of its identifier that ends earlier: the later-started
	// block holds (the documented bound of two offences within a poll of
	// each other).
	superseded bool
	proc       int // the process that started it
}

// tracedLift is a lift, as the trace knows it.
type tracedLift struct {
	at, storedAt int64 // storedAt: when the store first held it (0: not yet)
	by           int   // the process that lifted
}

func runPenaltyTrace(t *testing.T, rng *rand.Rand, topo traceTopology, events int) (checked, started, superseded int) {
	ctx := context.Background()
	c := &clock{}
	c.set(0)
	mem := memstore.New(memstore.WithClock(c))
	st := &faultyStore{Penalties: mem, rng: rand.New(rand.NewPCG(rng.Uint64(), 1)), faultEvery: topo.faultEvery}
	type proc struct {
		box                 *Box
		region              int
		nextFlush, nextPoll int64
		lastPollStart       int64 // the start of its last poll that answered
	}
	var procs []*proc
	for r := range topo.regions {
		for range topo.procs {
			b, err := New(WithClock(c), WithStore(st))
			if err != nil {
				t.Fatal(err)
			}
			procs = append(procs, &proc{box: b, region: r, lastPollStart: -1})
		}
	}
	ids := []string{"a", "b", "c", "d"}
	const penalty, top = 1000, 7000 // ms: 1 s doubling to 2, 4, then 7 s
	refs := map[string]*refBox{}
	for _, id := range ids {
		refs[id] = &refBox{}
	}
	var blocks []*tracedBlock
	lifts := map[string][]*tracedLift{}
	key := func(id string) Key { return Key{Workspace: "ws", Namespace: "ns", Identifier: id} }
	now := c.Now().UnixMilli()
	for ev := range events {
		now += 1 + rng.Int64N(150)
		c.ms.Store(now)
		// Background turns due.
		for _, p := range procs {
			if now >= p.nextFlush {
				p.box.flush(ctx)
				p.nextFlush = now + topo.flushMs[p.region]
			}
			if now >= p.nextPoll {
				if p.box.pollOnce(ctx) == nil {
					p.lastPollStart = now
				}
				p.nextPoll = now + topo.pollMs[p.region]
			}
		}
		for _, b := range blocks { // what the store holds now
			if b.storedAt == 0 {
				// The store holds it, or a state after it (a lift, or a
				// block that superseded it).
				if x, err := mem.Get(ctx, key(b.id)); err == nil && (x.Start == b.start && x.Until == b.end ||
					store.Later(x, Block{Start: b.start, Until: b.end})) {
					b.storedAt = now
				}
			}
		}
		for id, ls := range lifts {
			for _, l := range ls {
				if l.storedAt == 0 {
					if x, err := mem.Get(ctx, key(id)); err == nil && x.Cleared >= l.at {
						l.storedAt = now
					}
				}
			}
		}
		pi := rng.IntN(len(procs))
		p := procs[pi]
		id := ids[rng.IntN(len(ids))]
		k := key(id)
		x, blocked := p.box.Blocked(k, now)
		if topo.exactAsRefBox {
			ref := refs[id]
			if blocked != ref.blocked(now) || (blocked && (x.Start != ref.start || x.Until != ref.end)) {
				t.Fatalf("event %d at %d: %s blocked %v %+v; the reference: %v [%d, %d)", ev, now, id, blocked, x, ref.blocked(now), ref.start, ref.end)
			}
		}
		// The checks: every block the store held before this process's
		// last good poll holds here until its end, unless a lift voided it.
		for _, b := range blocks {
			if b.id != id || b.storedAt == 0 || b.storedAt >= p.lastPollStart || now >= b.end || b.unaware || b.superseded || lifted(lifts[id], b.start) {
				continue
			}
			checked++
			if !blocked || x.Until < b.end {
				t.Fatalf("event %d at %d: a process that polled at %d holds %s as %v %+v; the block [%d, %d) was in the store at %d",
					ev, now, p.lastPollStart, id, blocked, x, b.start, b.end, b.storedAt)
			}
		}
		for _, l := range lifts[id] {
			if l.storedAt != 0 && l.storedAt < p.lastPollStart && blocked && x.Start <= l.at {
				t.Fatalf("event %d at %d: a process that polled at %d still holds %s's block %+v, lifted at %d (in the store at %d)",
					ev, now, p.lastPollStart, id, x, l.at, l.storedAt)
			}
		}
		switch r := rng.IntN(100); {
		case r < 2: // a lift, through this process
			// A lift the store failed holds here and is written again
			// by the loop: it is a lift either way.
			if err := p.box.Lift(ctx, k); !errors.Is(err, ErrNotFound) {
				lifts[id] = append(lifts[id], &tracedLift{at: now, by: pi})
				refs[id] = &refBox{}
			}
		case !blocked && r < 40: // the limit denies: an offence
			got := p.box.Offend(k, penalty*time.Millisecond, top*time.Millisecond, now)
			if got.Start != now || got.Length() < penalty || got.Length() > top || !doubled(got.Length(), penalty, top) {
				t.Fatalf("event %d at %d: an offence of %s started %+v; want a block from now of the penalty doubled, at most the cap", ev, now, id, got)
			}
			if topo.exactAsRefBox {
				if s, e := refs[id].offend(now, penalty, top); s != got.Start || e != got.Until {
					t.Fatalf("event %d at %d: %s's block %+v; the reference [%d, %d)", ev, now, id, got, s, e)
				}
			}
			tb := &tracedBlock{id: id, start: got.Start, end: got.Until, proc: pi}
			for _, b := range blocks {
				// Only one that ends earlier shortens it.
				if b.id == id && b.proc != pi && b.start < got.Start && b.end > got.Until && (b.storedAt == 0 || b.storedAt >= p.lastPollStart) {
					b.superseded = true
				}
			}
			for _, l := range lifts[id] {
				read := l.by == pi || (l.storedAt != 0 && l.storedAt < p.lastPollStart)
				tb.unaware = tb.unaware || !read
			}
			blocks = append(blocks, tb)
		}
	}
	if topo.faultEvery > 0 && st.faults.Load() == 0 {
		t.Fatal("no fault was injected")
	}
	for _, b := range blocks {
		if b.superseded {
			superseded++
		}
	}
	return checked, len(blocks), superseded
}

// lifted reports whether one of ls, made at or after start, lifts a
// block that started then.
func lifted(ls []*tracedLift, start int64) bool {
	for _, l := range ls {
		if l.at >= start {
			return true
		}
	}
	return false
}

// doubled reports whether length is penalty doubled a whole number of
// times, or the cap.
func doubled(length, penalty, top int64) bool {
	if length == top {
		return true
	}
	for l := penalty; l <= top; l *= 2 {
		if l == length {
			return true
		}
	}
	return false
}

var _ = fmt.Sprint

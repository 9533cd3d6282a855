package penalties

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/services/penalties/memstore"
	"github.com/unkeyed/ratelimit/services/penalties/store"
)

// clock is a clock tests move by hand.
type clock struct{ ms atomic.Int64 }

func (c *clock) Now() time.Time           { return time.UnixMilli(c.ms.Load()) }
func (c *clock) set(at time.Duration)     { c.ms.Store(1_000_000 + at.Milliseconds()) }
func (c *clock) at(d time.Duration) int64 { return 1_000_000 + d.Milliseconds() }

func newBox(t *testing.T, c *clock, opts ...Option) *Box {
	t.Helper()
	b, err := New(append([]Option{WithClock(c)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var alice = Key{Workspace: "ws", Namespace: "login", Identifier: "alice"}

// TestDoublingUpToTheCap: a first offence blocks for the penalty; one
// within a block's length after the block ends doubles it, up to the cap;
// one later starts over; an offence during a block (a concurrent denial)
// returns the block in force.
func TestDoublingUpToTheCap(t *testing.T) {
	c := &clock{}
	b := newBox(t, c)
	const p, top = 10 * time.Second, 35 * time.Second
	for _, step := range []struct {
		at   time.Duration
		want time.Duration // the block's length
	}{
		{0, p},
		{5 * time.Second, p},        // during the block: the same one
		{12 * time.Second, 2 * p},   // 2 s after a 10 s block ended
		{40 * time.Second, top},     // 8 s after a 20 s block ended: 40 s, capped
		{40*time.Second + top*3, p}, // long after: a first block again
	} {
		c.set(step.at)
		x := b.Offend(alice, p, top, c.Now().UnixMilli())
		if x.Length() != step.want.Milliseconds() || !x.InForce(c.Now().UnixMilli()) {
			t.Fatalf("offence at %v: %+v (length %d ms), want a block of %v in force", step.at, x, x.Length(), step.want)
		}
		if got, ok := b.Blocked(alice, c.Now().UnixMilli()); !ok || got != x {
			t.Fatalf("Blocked at %v: %+v, %v", step.at, got, ok)
		}
	}
	if _, ok := b.Blocked(Key{Workspace: "ws", Namespace: "other", Identifier: "alice"}, c.Now().UnixMilli()); ok {
		t.Fatal("a block in one namespace holds in another")
	}
	if got := testutil.ToFloat64(b.metrics.penalties.WithLabelValues(kindRepeat)); got != 2 {
		t.Fatalf("repeat blocks counted: %v, want 2", got)
	}
	// Without a cap, doubling stops at MaxPenalty.
	c.set(0)
	b2 := newBox(t, c)
	var last Block
	for range 40 {
		last = b2.Offend(alice, time.Hour, 0, last.Until)
	}
	if last.Length() != MaxPenalty.Milliseconds() {
		t.Fatalf("uncapped doubling reached %d ms, want MaxPenalty", last.Length())
	}
}

// TestABlockHoldsAcrossProcesses: two boxes on one store are two
// processes: a block started in one holds in the other after a poll, and
// in a box started afterwards (a restart); lifted in one, it is lifted in
// every one after a poll, and the next offence is a first one again.
func TestABlockHoldsAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	c := &clock{}
	c.set(0)
	st := memstore.New(memstore.WithClock(c))
	a, b := newBox(t, c, WithStore(st)), newBox(t, c, WithStore(st))
	a.pollOnce(ctx)
	b.pollOnce(ctx)
	x := a.Offend(alice, time.Minute, 0, c.Now().UnixMilli())
	if _, ok := b.Blocked(alice, c.Now().UnixMilli()); ok {
		t.Fatal("blocked in another process before anything was written")
	}
	a.flush(ctx)
	c.set(time.Second)
	b.pollOnce(ctx)
	if got, ok := b.Blocked(alice, c.Now().UnixMilli()); !ok || got != x {
		t.Fatalf("the other process after a poll: %+v, %v; want %+v", got, ok, x)
	}
	restarted := newBox(t, c, WithStore(st))
	if err := restarted.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := restarted.Blocked(alice, c.Now().UnixMilli()); !ok {
		t.Fatal("a process started during the block does not hold it")
	}
	got, err := restarted.Get(ctx, alice)
	if err != nil || got.Until != x.Until {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	c.set(2 * time.Second)
	if err := b.Lift(ctx, alice); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Blocked(alice, c.Now().UnixMilli()); ok {
		t.Fatal("still blocked where it was lifted")
	}
	a.pollOnce(ctx)
	if _, ok := a.Blocked(alice, c.Now().UnixMilli()); ok {
		t.Fatal("still blocked where it started, after a poll")
	}
	if err := a.Lift(ctx, alice); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lifting a lifted block: %v, want ErrNotFound", err)
	}
	if again := a.Offend(alice, time.Minute, 0, c.Now().UnixMilli()); again.Length() != time.Minute.Milliseconds() {
		t.Fatalf("the offence after a lift: %+v, want a first block", again)
	}
}

// TestAnOffenceAfterALiftForgotten: a process that forgot a lift (its
// janitor dropped the lifted box), or never read it, starts a block after
// it that holds everywhere: the lift beats only the blocks that began
// before it.
func TestAnOffenceAfterALiftForgotten(t *testing.T) {
	ctx := context.Background()
	c := &clock{}
	c.set(0)
	st := memstore.New(memstore.WithClock(c))
	a, b := newBox(t, c, WithStore(st)), newBox(t, c, WithStore(st))
	a.Offend(alice, time.Minute, 0, c.Now().UnixMilli())
	a.flush(ctx)
	c.set(time.Second)
	if err := a.Lift(ctx, alice); err != nil {
		t.Fatal(err)
	}
	c.set(2 * time.Hour)
	a.forget(c.Now().UnixMilli())
	fresh := newBox(t, c, WithStore(st))
	if err := fresh.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for i, x := range []*Box{a, fresh} {
		now := c.Now().UnixMilli() + int64(i)
		got := x.Offend(alice, time.Minute, 0, now)
		x.flush(ctx)
		for _, y := range []*Box{a, b, fresh} {
			y.pollOnce(ctx)
			if held, ok := y.Blocked(alice, now); !ok || held.Start != got.Start {
				t.Fatalf("offence %d after a lift its process forgot or never read: %+v, %v; want %+v everywhere", i, held, ok, got)
			}
		}
		c.set(2*time.Hour + time.Duration(i+1)*3*time.Minute)
	}
}

// failing is a store whose writes fail while down is set, and which
// applies a write and then fails it while lost is set (the answer lost).
type failing struct {
	store.Penalties
	down, lost atomic.Bool
	writes     atomic.Int64
}

var errDown = errors.New("store down")

func (f *failing) Merge(ctx context.Context, b Block) error {
	f.writes.Add(1)
	if f.down.Load() {
		return errDown
	}
	err := f.Penalties.Merge(ctx, b)
	if f.lost.Load() {
		return errDown
	}
	return err
}

func (f *failing) Changes(ctx context.Context, since, now int64, limit int) ([]Block, int64, error) {
	if f.down.Load() {
		return nil, 0, errDown
	}
	return f.Penalties.Changes(ctx, since, now, limit)
}

// TestAStoreThatFails: while the store fails, a block holds where it
// started and its write waits; a write applied whose answer was lost is
// written again, which changes nothing; once the store answers, every
// process holds the block as it was started, never shorter.
func TestAStoreThatFails(t *testing.T) {
	ctx := context.Background()
	c := &clock{}
	c.set(0)
	mem := memstore.New(memstore.WithClock(c))
	f := &failing{Penalties: mem}
	a, b := newBox(t, c, WithStore(f)), newBox(t, c, WithStore(mem))
	f.down.Store(true)
	x := a.Offend(alice, time.Minute, 0, c.Now().UnixMilli())
	a.flush(ctx)
	if _, ok := a.Blocked(alice, c.Now().UnixMilli()); !ok {
		t.Fatal("a block does not hold where it started while the store is down")
	}
	f.down.Store(false)
	f.lost.Store(true)
	a.flush(ctx) // applied, answer lost: queued again
	f.lost.Store(false)
	a.flush(ctx) // the replay
	if n := f.writes.Load(); n != 3 {
		t.Fatalf("%d writes, want 3 (failed, lost, replayed)", n)
	}
	c.set(30 * time.Second)
	b.pollOnce(ctx)
	got, ok := b.Blocked(alice, c.Now().UnixMilli())
	if !ok || got.Start != x.Start || got.Until != x.Until {
		t.Fatalf("the other process once the store answers: %+v, %v; want %+v", got, ok, x)
	}
}

// TestMemoryIsBounded: past WithMaxBlocks an offence blocks nothing and is
// counted; boxes that stopped mattering are forgotten.
func TestMemoryIsBounded(t *testing.T) {
	c := &clock{}
	c.set(0)
	reg := prometheus.NewRegistry()
	b := newBox(t, c, WithMaxBlocks(2), WithRegisterer(reg))
	now := c.Now().UnixMilli()
	for _, id := range []string{"a", "b", "c"} {
		b.Offend(Key{Workspace: "ws", Namespace: "ns", Identifier: id}, time.Second, 0, now)
	}
	if _, ok := b.Blocked(Key{Workspace: "ws", Namespace: "ns", Identifier: "c"}, now); ok {
		t.Fatal("a third box past a cap of two")
	}
	if got := testutil.ToFloat64(b.metrics.penalties.WithLabelValues(kindDropped)); got != 1 {
		t.Fatalf("dropped: %v, want 1", got)
	}
	b.forget(c.at(2 * time.Second))
	if b.live.Load() != 0 || b.boxes.Size() != 0 {
		t.Fatalf("after the blocks expired: %d live, %d held", b.live.Load(), b.boxes.Size())
	}
}

// TestRunWritesAndStops: Run writes a block as it starts and once more as
// it stops.
func TestRunWritesAndStops(t *testing.T) {
	c := &clock{}
	c.set(0)
	mem := memstore.New(memstore.WithClock(c))
	b := newBox(t, c, WithStore(mem), WithPollInterval(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = b.Run(ctx) }()
	b.Offend(alice, time.Minute, 0, c.Now().UnixMilli())
	cancel()
	wg.Wait()
	if _, err := mem.Get(context.Background(), alice); err != nil {
		t.Fatalf("the block after Run stopped: %v", err)
	}
}

// TestFlushWritesInTurns: a burst of offences is written a turn of
// writesPerTurn at a time, each turn asking for the next, so that the
// loop's polls run between them; every block is written in the end.
func TestFlushWritesInTurns(t *testing.T) {
	ctx := context.Background()
	c := &clock{}
	c.set(0)
	st := memstore.New(memstore.WithClock(c))
	a, b := newBox(t, c, WithStore(st)), newBox(t, c, WithStore(st))
	const n = 2*writesPerTurn + 500
	for i := range n {
		a.Offend(Key{Workspace: "ws", Namespace: "login", Identifier: fmt.Sprint("user_", i)}, time.Minute, 0, c.Now().UnixMilli())
	}
	<-a.wake // the offences' signal
	if !a.flush(ctx) || len(a.pending) != n-writesPerTurn || len(a.wake) != 1 {
		t.Fatalf("after a turn: %d pending, wake %d; want %d left and the next turn asked for", len(a.pending), len(a.wake), n-writesPerTurn)
	}
	for a.flush(ctx) {
	}
	if len(a.pending) != 0 {
		t.Fatalf("%d pending after the turns", len(a.pending))
	}
	b.pollOnce(ctx)
	if got := b.live.Load(); got != n {
		t.Fatalf("another process holds %d blocks, want %d", got, n)
	}
}

package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// marking is a regional store that indexes marked cells (store.Unpublished)
// and records, by cell, the marks it took: what the processes that publish
// a dead process's counts will find. It can be taken down.
type marking struct {
	*storetest.FaultyRegional
	mem   *storetest.MemRegional
	mu    sync.Mutex
	marks map[cellMark]int
}

// cellMark names a cell of the one key these tests count on.
type cellMark struct {
	seq     int64
	refunds bool
}

func newMarking() *marking {
	mem := storetest.NewMemRegional()
	return &marking{FaultyRegional: storetest.NewFaultyRegional(mem), mem: mem, marks: map[cellMark]int{}}
}

func (m *marking) Increment(ctx context.Context, incs []store.Increment) ([]int64, error) {
	counts, err := m.FaultyRegional.Increment(ctx, incs)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, inc := range incs {
		if inc.Mark > 0 && i < len(counts) && counts[i] >= 0 {
			m.marks[cellMark{inc.Key.Sequence, inc.Key.Refunds}]++
		}
	}
	return counts, err
}

// marked returns how many times the cell seq (or its refunds) was marked.
func (m *marking) marked(seq int64, refunds bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.marks[cellMark{seq, refunds}]
}

func (m *marking) Idle(context.Context, time.Time, int) ([]store.IdleCell, error) { return nil, nil }
func (m *marking) Forget(context.Context, []store.IdleCell) error                 { return nil }

// newMarked returns a process of a region with a global store, whose
// regional store is m, and its clock.
func newMarked(t *testing.T, m *marking) (*regionalService, *fakeClock) {
	t.Helper()
	clock := newFakeClock(1_700_000_010_000)
	s := newTestService(t, clock, WithRegionalStore(m), WithGlobalStore(storetest.NewMemGlobal()))
	return &regionalService{Service: s}, clock
}

// takeOne takes a slot of 10 on p, held for a minute, and returns the
// acquisition and the slot.
func takeOne(t *testing.T, p *regionalService) (Acquisition, Slot) {
	t.Helper()
	a := acq("user", 10, time.Minute)
	sl, ok := acquire(t, p.Service, a)
	if !ok {
		t.Fatal("a slot of 10 refused")
	}
	return a, sl
}

// TestTakenSlotsAreMarked: slots taken in the regional store at once, which
// no replay sends, are marked by the next replay, which adds nothing to
// their count.
func TestTakenSlotsAreMarked(t *testing.T) {
	m := newMarking()
	p, _ := newMarked(t, m)
	_, sl := takeOne(t, p)
	key := slotCell(sl)
	before := m.mem.Count(key)
	p.tick()
	if got := m.marked(sl.Sequence, false); got != 1 {
		t.Errorf("cell of the taken slot marked %d times, want 1", got)
	}
	if after := m.mem.Count(key); after != before || after != 1 {
		t.Errorf("the store's count went %d -> %d with the mark, want 1 -> 1", before, after)
	}
}

// TestExtendedSlotsAreMarked: an extension counts its slot in a new cell
// through the store at once; the cell, empty when the write was sent, is
// marked by the next replay. Before, it never was: a process that then
// died left the slot unpublished while its holder kept extending it.
func TestExtendedSlotsAreMarked(t *testing.T) {
	m := newMarking()
	p, clock := newMarked(t, m)
	a, sl := takeOne(t, p)
	p.tick()
	clock.Advance(30 * time.Second)
	resp, err := p.Extend(context.Background(), sl, 0)
	if err != nil || !resp.Success {
		t.Fatalf("Extend: %+v, %v", resp, err)
	}
	seq := LeaseCell(resp, a.Lease)
	if seq == sl.Sequence {
		t.Fatalf("the extension stayed in cell %d", seq)
	}
	p.tick()
	if got := m.marked(seq, false); got != 1 {
		t.Errorf("cell %d of the extended slot marked %d times, want 1", seq, got)
	}
}

// TestReleaseMarkedAfterAFailedWrite: a release whose write to the store
// failed is replayed with its mark. Before, the failed write left the cell
// flagged as marked, and the replay sent it without one.
func TestReleaseMarkedAfterAFailedWrite(t *testing.T) {
	m := newMarking()
	p, _ := newMarked(t, m)
	_, sl := takeOne(t, p)
	p.tick()
	m.SetDown(true)
	if freed, err := p.Release(context.Background(), sl); err != nil || freed.Given != 1 {
		t.Fatalf("Release with the store down: %+v, %v", freed, err)
	}
	m.SetDown(false)
	p.tick()
	if got := m.marked(sl.Sequence, true); got != 1 {
		t.Errorf("refunds of cell %d marked %d times after the store came back, want 1", sl.Sequence, got)
	}
}

// TestFailedMarkIsSentAgain: a replay sent only to mark a cell of taken
// slots that the store did not take is sent again. Before, it was dropped:
// the slots went unmarked unless another was taken in the cell.
func TestFailedMarkIsSentAgain(t *testing.T) {
	m := newMarking()
	p, _ := newMarked(t, m)
	_, sl := takeOne(t, p)
	m.SetDown(true)
	p.tick()
	m.SetDown(false)
	p.tick()
	if got := m.marked(sl.Sequence, false); got != 1 {
		t.Errorf("cell of the taken slot marked %d times after a failed mark, want 1", got)
	}
	p.tick() // marked: nothing more to send
	if got := m.marked(sl.Sequence, false); got != 1 {
		t.Errorf("cell marked %d times after another replay, want still 1", got)
	}
}

// sends is a regional store without an index of marks, which counts the
// increments of counts it was sent without a delta.
type sends struct {
	*storetest.MemRegional
	mu    sync.Mutex
	empty int
}

func (s *sends) Increment(ctx context.Context, incs []store.Increment) ([]int64, error) {
	s.mu.Lock()
	for _, inc := range incs {
		if inc.Delta == 0 && inc.Writer == "" {
			s.empty++ // a refunds write carries its total, not a delta
		}
	}
	s.mu.Unlock()
	return s.MemRegional.Increment(ctx, incs)
}

// TestNoMarksWithoutAnIndex: with a regional store that does not index
// marks (no store.Unpublished), what the store takes at once queues no
// replay to mark it, and none is sent.
func TestNoMarksWithoutAnIndex(t *testing.T) {
	o := &sends{MemRegional: storetest.NewMemRegional()}
	clock := newFakeClock(1_700_000_010_000)
	p := &regionalService{Service: newTestService(t, clock, WithRegionalStore(o), WithGlobalStore(storetest.NewMemGlobal()))}
	_, sl := takeOne(t, p)
	clock.Advance(time.Minute)
	if _, err := p.Extend(context.Background(), sl, 0); err != nil {
		t.Fatal(err)
	}
	if n, _ := p.regional.Pending(); n != 0 {
		t.Errorf("%d cells queued for a replay after a take and an extension the store took, want 0", n)
	}
	p.tick()
	if o.empty != 0 {
		t.Errorf("%d increments without a delta sent to a store that indexes no marks, want 0", o.empty)
	}
}

package regional

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
)

// A take of slots in the regional store is idempotent (see
// store.SlotTaker): it carries its writer's total in the cell, so that a
// take the store applied and then answered too late is not counted again
// by what follows it (the same total, written by a replay). A writer has
// one take in flight at a time, so that a take the store refused can take
// its cost back off its total before a later take counts on it: a process
// takes a limit's slots through lanes, each a writer of its own in the
// store, each holding one take at a time.

// maxTakeLanes bounds the takes of one concurrency limit a process has in
// flight at once, and the writers it adds to each of the limit's cells in
// the store. A take that finds every lane busy waits for one, as long as
// a take may wait on the store, and then decides from memory, as when the
// store fails.
const maxTakeLanes = 64

// takeLanes are the lanes of one concurrency limit's window in this
// process.
type takeLanes struct {
	// name names the lanes within the process: one per window object, so
	// that a window the janitor removed and another request made again
	// takes as other writers, whose totals start from zero beside the old
	// ones' rather than under them.
	name string
	// free holds the lanes no take holds.
	free chan *takeLane
	// lost counts the lanes held by takes whose answers were lost: a take
	// does not wait for a lane when every lane is held so (the store is
	// down; they are freed when it answers again).
	lost atomic.Int64
	mu   sync.Mutex
	// all holds every lane made, by number: a store that lost its data is
	// sent each one's totals again (see Tier.laneTotals).
	all []*takeLane
}

// takeLane is one writer of a limit's takes. Its writer never changes;
// its totals are guarded by takeLanes.mu, and only the take that holds
// the lane (see takeLanes.acquire) changes them.
type takeLane struct {
	writer string
	// Totals are the lane's totals in its two latest cells, the take
	// in flight included, and what of them is settled: what the store
	// holds, or will once a lost answer's total is written again.
	cells.Totals
}

// lanesOf returns the lanes of w, making them on first use.
func (r *Tier) lanesOf(w *cells.Window) *takeLanes {
	l, _ := r.lanes.LoadOrCompute(w, func() (*takeLanes, bool) {
		return &takeLanes{name: "t" + strconv.FormatUint(r.writers.Add(1), 10), free: make(chan *takeLane, maxTakeLanes)}, false
	})
	return l
}

// acquire returns a free lane, made if there are fewer than maxTakeLanes,
// or waits up to wait for one to be released; nil when none was, and at
// once when every lane is held by a lost take. writer is the process's
// name in the store; a lane's is it, the set's name and the lane's
// number.
func (l *takeLanes) acquire(ctx context.Context, writer string, wait time.Duration) *takeLane {
	select {
	case lane := <-l.free:
		return lane
	default:
	}
	l.mu.Lock()
	if n := len(l.all); n < maxTakeLanes {
		lane := &takeLane{writer: writer + "/" + l.name + "." + strconv.Itoa(n)}
		l.all = append(l.all, lane)
		l.mu.Unlock()
		return lane
	}
	l.mu.Unlock()
	if l.lost.Load() >= maxTakeLanes {
		return nil // none is in flight: none comes free before the store answers
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case lane := <-l.free:
		return lane
	case <-timer.C:
	case <-ctx.Done():
	}
	return nil
}

// add adds cost (negative: takes it back) to lane's total in cell seq and
// returns the new total. The caller holds lane.
func (l *takeLanes) add(lane *takeLane, seq, cost int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return lane.Totals.Add(seq, cost)
}

// release frees lane, its take settled: the store holds its total in
// seq, or (a lost answer) a replay has written it.
func (l *takeLanes) release(lane *takeLane, seq int64) {
	l.mu.Lock()
	lane.Settle(seq)
	l.mu.Unlock()
	l.free <- lane // never blocks: it holds every lane
}

// settled returns, for each lane, its writer and settled total in cell
// seq, where it has one.
func (l *takeLanes) settled(seq int64, each func(writer string, total int64)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, lane := range l.all {
		if n := lane.AckedAt(seq); n > 0 {
			each(lane.writer, n)
		}
	}
}

// lostTake is a take whose answer was lost: the store may or may not hold
// it. Its lane stays held until a replay has written its total (see
// Tier.resendTakes), and what it took counts as held meanwhile
// (it stays listed until the store has answered).
type lostTake struct {
	w     *cells.Window
	lanes *takeLanes
	lane  *takeLane
	seq   int64
	total int64
	cost  int64
}

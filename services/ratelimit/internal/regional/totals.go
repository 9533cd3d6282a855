package regional

import (
	"strconv"
	"sync"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
)

// writtenTotals is what this process wrote into the two cells of one window
// whose cells are written as totals (refunds; a concurrency limit's
// slots) so far, by sequence, and what the store acknowledged of it.
type writtenTotals struct {
	// name is the writer's name within the process: one per window
	// object, so that a window the janitor removed and another request
	// made again writes as another writer, whose total starts from zero
	// beside the old one's rather than under it.
	name string
	mu   sync.Mutex
	cells.Totals
}

// addTotal adds amount (0 or more) to what this process wrote into w's
// cell seq, and returns the writer's name and the new total: what a write
// of the cell to the regional store carries (see store.Increment.Writer).
func (r *Tier) addTotal(w *cells.Window, seq, amount int64) (string, int64) {
	g := r.totalsOf(w)
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.name, g.Add(seq, amount)
}

// totalsOf returns w's totals, made on first use with a name of their own.
func (r *Tier) totalsOf(w *cells.Window) *writtenTotals {
	g, _ := r.totals.LoadOrCompute(w, func() (*writtenTotals, bool) {
		return &writtenTotals{name: "g" + strconv.FormatUint(r.writers.Add(1), 10)}, false
	})
	return g
}

// acked records that the store holds total of w's cell seq.
func (r *Tier) acked(w *cells.Window, seq, total int64) {
	g, ok := r.totals.Load(w)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.Ack(seq, total)
}

// unacked returns what this process wrote into w's cell seq that the
// store has not acknowledged: a write that failed and waits for the
// replay, which the store may not hold.
func (r *Tier) unacked(w *cells.Window, seq int64) int64 {
	g, ok := r.totals.Load(w)
	if !ok {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.Totals.Unacked(seq)
}

package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/global"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// indexed is a regional store with an index of n marked cells, all idle
// and expired: what a caller's one-request windows leave behind.
type indexed struct {
	*storetest.MemRegional
	left, reads int
}

func (x *indexed) Idle(_ context.Context, _ time.Time, max int) ([]store.IdleCell, error) {
	x.reads++
	n := min(max, x.left)
	cells := make([]store.IdleCell, n)
	for i := range cells {
		cells[i] = store.IdleCell{CellCount: store.CellCount{Key: store.CellKey{Workspace: "ws", Namespace: "ns",
			Identifier: "id", Duration: time.Second, Sequence: int64(x.left - i)}}}
	}
	return cells, nil
}

func (x *indexed) Forget(_ context.Context, cells []store.IdleCell) error {
	x.left -= len(cells)
	return nil
}

// TestFullFlushDrainsTheIndex: one full flush drains the index of marked
// cells in rounds until a round comes back short. Before, a flush read
// one round of 1,000: an index filled at request rate drained at ~100 a
// second per process (269,130 marks left of 300,000 one-request windows).
func TestFullFlushDrainsTheIndex(t *testing.T) {
	for _, n := range []int{0, 999, 1000, 25_500, global.MaxIdlePerFlush * (global.MaxIdleRounds + 5)} {
		x := &indexed{MemRegional: storetest.NewMemRegional(), left: n}
		s := newTestService(t, newFakeClock(10_000_000), WithRegionalStore(x), WithGlobalStore(storetest.NewMemGlobal()))
		s.global.PublishIdle(context.Background())
		want := max(0, n-global.MaxIdlePerFlush*global.MaxIdleRounds)
		if x.left != want {
			t.Errorf("%d idle marks: %d left after one full flush (%d rounds), want %d", n, x.left, x.reads, want)
		}
	}
}

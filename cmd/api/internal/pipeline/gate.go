package pipeline

import (
	"context"
	"fmt"
	"runtime"

	"github.com/puzpuzpuz/xsync/v4"
	"golang.org/x/sync/semaphore"
)

// batchGate bounds the batch work each workspace has in flight: the entries
// of its BatchLimit, MultiLimit and v2 multiLimit calls being decided at
// once. A workspace that sends more waits its turn (until its call's
// context ends), so one tenant hammering batches from many connections
// keeps to its share of the cores and another tenant's calls are not
// starved. Single Limit calls are not gated: they cost a fraction of a
// microsecond. golang.org/x/sync/semaphore's weighted semaphore is FIFO, so
// a large batch is not overtaken forever by small ones.
type batchGate struct {
	perWorkspace int64
	gates        *xsync.Map[string, *semaphore.Weighted]
}

// DefaultBatchEntriesInFlight is how many batch entries one workspace may
// have in flight: a full BatchLimit (MaxBatchLimit entries, a fraction of a
// millisecond of CPU) for every two cores, so that one workspace keeps at
// most half the cores busy.
func DefaultBatchEntriesInFlight() int64 {
	return int64(max(1, runtime.GOMAXPROCS(0)/2) * MaxBatchLimit)
}

func newBatchGate(perWorkspace int64) *batchGate {
	return &batchGate{perWorkspace: perWorkspace, gates: xsync.NewMap[string, *semaphore.Weighted]()}
}

// enter waits until the workspace may start a batch of n entries and
// returns the function that ends it, or the context's error as a Connect
// error.
func (g *batchGate) enter(ctx context.Context, workspace string, n int) (func(), error) {
	w := min(int64(n), g.perWorkspace)
	sem, _ := g.gates.LoadOrCompute(workspace, func() (*semaphore.Weighted, bool) {
		return semaphore.NewWeighted(g.perWorkspace), false
	})
	if err := sem.Acquire(ctx, w); err != nil {
		return nil, fmt.Errorf("waiting for this workspace's other batches: %w", err)
	}
	return func() { sem.Release(w) }, nil
}

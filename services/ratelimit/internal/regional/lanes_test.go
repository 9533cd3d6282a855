package regional

import (
	"context"
	"testing"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// TestWindowMadeAgainWritesAsAnotherWriter: a window the janitor removed
// and a request made again (a race at the edge of idleness) takes and
// writes its totals under other names than the window it replaces: its
// totals start from zero beside the old ones in the store, not under
// them, where the store would take its first takes for ones it had
// applied.
func TestWindowMadeAgainWritesAsAnotherWriter(t *testing.T) {
	r := New(nil, nil, nil, nil, nil, nil)
	k := cells.Key{Workspace: "ws", Namespace: "ns", Identifier: "pool", Period: period.ForLease(60_000, 1_700_000_010_000)}
	old := cells.NewWindow(&k)
	oldLane := r.lanesOf(old).acquire(context.Background(), "p", 0)
	oldName, _ := r.addTotal(old, 1, 1)
	r.Forget(old)
	again := cells.NewWindow(&k)
	lane := r.lanesOf(again).acquire(context.Background(), "p", 0)
	name, _ := r.addTotal(again, 1, 1)
	if lane.writer == oldLane.writer || name == oldName {
		t.Fatalf("the window made again writes as %q and %q, the old one as %q and %q", lane.writer, name, oldLane.writer, oldName)
	}
}

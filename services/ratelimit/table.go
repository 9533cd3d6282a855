package ratelimit

import (
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/pool"
)

// windowTable is the cell table with what the models and tiers keep beside
// its windows: each is beside the window rather than in it, so that the
// windows that need none of it, nearly all of them, do not carry its
// pointer (a window is 72 bytes, in the 80-byte size class). It is the
// table's companion: the table tells it of each window filed and removed.
type windowTable struct {
	cells.Table
	// buckets holds the state of each window decided as a token bucket;
	// bucketIDs holds the same buckets by identity: the windows of one
	// bucket's cell lengths share it.
	buckets   *xsync.Map[*cells.Window, *bucket]
	bucketIDs *xsync.Map[bucketID, *bucket]
	// given holds, for each window whose cells this process writes as
	// totals (refunds, slots), what it wrote into each of its two cells in
	// all (see giveBack). writers numbers their names (see givenBack and
	// takeLanes).
	writers atomic.Uint64
	given   *xsync.Map[*cells.Window, *givenBack]
	// lanes holds, for each concurrency limit's window this process took
	// slots of in the regional store, the writers it took them as (see
	// takeLanes).
	lanes *xsync.Map[*cells.Window, *takeLanes]
	// zones groups the calendar windows of one identity and unit by time
	// zone (see zones.go).
	zones zones
	// pools groups the windows of a concurrency limit's cells by limit
	// (see internal/pool).
	pools pool.Set
}

// init readies an empty table: see cells.Table.Init. A table is not copied
// once in use.
func (t *windowTable) init(m *metrics, maxPerWorkspace int64) {
	t.Table.Init(maxPerWorkspace, &CapacityError{Max: maxPerWorkspace}, cells.Counters{
		Created:  m.windowsCreated,
		Evicted:  m.windowsEvicted,
		Rejected: m.windowsRejected.WithLabelValues("request"),
	}, t)
	t.buckets = xsync.NewMap[*cells.Window, *bucket]()
	t.bucketIDs = xsync.NewMap[bucketID, *bucket]()
	t.given = xsync.NewMap[*cells.Window, *givenBack]()
	t.lanes = xsync.NewMap[*cells.Window, *takeLanes]()
	t.zones.groups = xsync.NewMap[zoneID, *zoneGroup]()
	t.pools.Init()
}

// Filed files w, new in the table, in its group: a calendar's zones, a
// concurrency limit's pool.
func (t *windowTable) Filed(w *cells.Window) {
	switch k := w.Key(); {
	case w.Period().Kind() == period.Pool:
		// The other window of the cell (its releases', or the cell's),
		// looked up while the pool is held: a pair made at once is
		// filed together whichever comes second.
		k.Refunds = !k.Refunds
		t.pools.Add(w, func() *cells.Window { return t.Find(&k) })
	case w.Period().Kind() == period.Calendar && !w.HoldsRefunds():
		t.zones.add(w)
	}
}

// Keeps reports whether w is a token bucket that has not refilled at now
// (unix ms): its cells may be idle, but its level is still what the
// bucket's next decision needs, and no store holds it.
func (t *windowTable) Keeps(w *cells.Window, now int64) bool {
	b, ok := t.buckets.Load(w)
	return ok && !b.full(now)
}

// Forgot drops what the table holds beside w, which the janitor removed:
// its bucket, what it gave back, the lanes it took slots through, its
// place among a calendar's zones or in a concurrency limit's pool.
func (t *windowTable) Forgot(w *cells.Window) {
	t.dropBucket(w)
	t.given.Delete(w)
	t.lanes.Delete(w)
	switch {
	case w.Period().Kind() == period.Pool:
		t.pools.Remove(w)
	case w.Period().Kind() == period.Calendar && !w.HoldsRefunds():
		t.zones.remove(w)
	}
}

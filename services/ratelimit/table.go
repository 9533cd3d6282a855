package ratelimit

import (
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// windowTable is the cell table with what the models and tiers keep beside
// its windows: each is beside the window rather than in it, so that the
// windows that need none of it, nearly all of them, do not carry its
// pointer (a window is 72 bytes, in the 80-byte size class). It is the
// table's companion: the table tells it of each window filed and removed.
type windowTable struct {
	cellTable
	// buckets holds the state of each window decided as a token bucket;
	// bucketIDs holds the same buckets by identity: the windows of one
	// bucket's cell lengths share it.
	buckets   *xsync.Map[*window, *bucket]
	bucketIDs *xsync.Map[bucketID, *bucket]
	// given holds, for each window whose cells this process writes as
	// totals (refunds, slots), what it wrote into each of its two cells in
	// all (see giveBack). writers numbers their names (see givenBack and
	// takeLanes).
	writers atomic.Uint64
	given   *xsync.Map[*window, *givenBack]
	// lanes holds, for each concurrency limit's window this process took
	// slots of in the regional store, the writers it took them as (see
	// takeLanes).
	lanes *xsync.Map[*window, *takeLanes]
	// zones groups the calendar windows of one identity and unit by time
	// zone (see zones.go).
	zones zones
	// pools groups the windows of a concurrency limit's cells by limit
	// (see pool.go).
	pools pools
}

// init readies an empty table: see cellTable.init. A table is not copied
// once in use.
func (t *windowTable) init(m *metrics, maxPerWorkspace int64) {
	t.cellTable.init(maxPerWorkspace, &CapacityError{Max: maxPerWorkspace}, tableCounters{
		created:  m.windowsCreated,
		evicted:  m.windowsEvicted,
		rejected: m.windowsRejected.WithLabelValues("request"),
	}, t)
	t.buckets = xsync.NewMap[*window, *bucket]()
	t.bucketIDs = xsync.NewMap[bucketID, *bucket]()
	t.given = xsync.NewMap[*window, *givenBack]()
	t.lanes = xsync.NewMap[*window, *takeLanes]()
	t.zones.groups = xsync.NewMap[zoneID, *zoneGroup]()
	t.pools.groups = xsync.NewMap[poolID, *poolGroup]()
	t.pools.byWindow = xsync.NewMap[*window, *poolGroup]()
}

// filed files w, new in the table, in its group: a calendar's zones, a
// concurrency limit's pool.
func (t *windowTable) filed(w *window) {
	switch k := w.key(); {
	case w.period().Kind() == period.Pool:
		// The other window of the cell (its releases', or the cell's),
		// looked up while the pool is held: a pair made at once is
		// filed together whichever comes second.
		k.refunds = !k.refunds
		t.pools.add(w, func() *window { return t.find(&k) })
	case w.period().Kind() == period.Calendar && !w.holdsRefunds():
		t.zones.add(w)
	}
}

// keeps reports whether w is a token bucket that has not refilled at now
// (unix ms): its cells may be idle, but its level is still what the
// bucket's next decision needs, and no store holds it.
func (t *windowTable) keeps(w *window, now int64) bool {
	b, ok := t.buckets.Load(w)
	return ok && !b.full(now)
}

// forgot drops what the table holds beside w, which the janitor removed:
// its bucket, what it gave back, the lanes it took slots through, its
// place among a calendar's zones or in a concurrency limit's pool.
func (t *windowTable) forgot(w *window) {
	t.dropBucket(w)
	t.given.Delete(w)
	t.lanes.Delete(w)
	switch {
	case w.period().Kind() == period.Pool:
		t.pools.remove(w)
	case w.period().Kind() == period.Calendar && !w.holdsRefunds():
		t.zones.remove(w)
	}
}

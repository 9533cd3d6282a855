package model

import (
	"github.com/puzpuzpuz/xsync/v4"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/global"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/pool"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/regional"
)

// Table is the cell table with what the models keep beside its windows,
// and what a decision tells of what it counted: the tiers, and a hot
// key's lock. What the models keep is beside the window rather than in
// it, so that the windows that need none of it, nearly all of them, do
// not carry its pointer (a window is 80 bytes, filling its size
// class). It is the table's companion: the table tells it of each window
// filed and removed. The zero Table is not ready: call Init, then set
// the tiers; a Table is not copied once in use.
type Table struct {
	cells.Table
	// Regional is the regional tier, nil without a regional store; it
	// keeps what this process wrote of a window's totals beside it, which
	// goes with the window (see Forgot). Global is the global tier, nil
	// without a global store.
	Regional *regional.Tier
	Global   *global.Tier
	// Contention holds the locks of keys hot enough that a decision lost
	// several races to count on them (see cells.Contention).
	Contention *cells.Contention
	// BeforeCAS, when set, runs before every compare-and-swap of a
	// decision: tests make races lost with it.
	BeforeCAS func(w *cells.Window, c *cells.Cell, attempt int)
	// buckets holds the state of each window decided as a token bucket;
	// bucketIDs holds the same buckets by identity: the windows of one
	// bucket's cell lengths share it.
	buckets   *xsync.Map[*cells.Window, *Bucket]
	bucketIDs *xsync.Map[bucketID, *Bucket]
	// zones groups the calendar windows of one identity and unit by time
	// zone (see zones.go).
	zones zones
	// pools groups the windows of a concurrency limit's cells by limit
	// (see package pool).
	pools pool.Set
}

// Init readies an empty table of at most maxPerWorkspace windows a
// workspace (full, the error of a workspace at its cap), counting in
// counters: see cells.Table.Init.
func (t *Table) Init(maxPerWorkspace int64, full error, counters cells.Counters) {
	t.Table.Init(maxPerWorkspace, full, counters, t)
	t.buckets = xsync.NewMap[*cells.Window, *Bucket]()
	t.bucketIDs = xsync.NewMap[bucketID, *Bucket]()
	t.zones.groups = xsync.NewMap[zoneID, *zoneGroup]()
	t.pools.Init()
}

// Pools returns the table's concurrency pools.
func (t *Table) Pools() *pool.Set { return &t.pools }

// Filed files w, new in the table, in its group: a calendar's zones, a
// concurrency limit's pool.
func (t *Table) Filed(w *cells.Window) {
	switch p := w.Period(); {
	case pool.IsCell(p):
		t.pools.File(w, &t.Table)
	case p.Kind() == period.Calendar && !w.HoldsRefunds():
		t.zones.add(w)
	}
}

// WrittenAsTotals reports whether the processes write w's cells to the
// regional store as totals, each the largest of its writer's, rather than
// as increments: refunds (but a token bucket's refunds window, which holds
// seeds, max-merged as counts are), and a concurrency limit's slots. A
// total written twice counts once.
func (t *Table) WrittenAsTotals(w *cells.Window) bool {
	p := w.Period()
	return (w.HoldsRefunds() && p.Kind() != period.Bucket) || pool.IsCell(p)
}

// Keeps reports whether w is a token bucket that has not refilled at now
// (unix ms): its cells may be idle, but its level is still what the
// bucket's next decision needs, and no store holds it.
func (t *Table) Keeps(w *cells.Window, now int64) bool {
	b, ok := t.buckets.Load(w)
	return ok && !b.full(now)
}

// Forgot drops what is held beside w, which the janitor removed: its
// bucket, its place among a calendar's zones or in a concurrency limit's
// pool, and what the regional tier keeps of it (what it gave back, the
// lanes it took slots through).
func (t *Table) Forgot(w *cells.Window) {
	t.dropBucket(w)
	t.Regional.Forget(w)
	switch {
	case pool.IsCell(w.Period()):
		t.pools.Remove(w)
	case w.Period().Kind() == period.Calendar && !w.HoldsRefunds():
		t.zones.remove(w)
	}
}

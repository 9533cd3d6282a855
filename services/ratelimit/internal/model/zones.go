package model

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
)

// A calendar's time zone is a parameter of the limit, not its identity: a
// monthly quota sent in UTC and then in Europe/Berlin is the same quota.
// Its periods are counted in cells of the zone's calendar (a period of
// its own: see period.OfCalendar), so that periods of two zones, which overlap without
// coinciding, are kept apart; what they share is carried over: a decision
// in one zone's period first raises that period's count to what each other
// zone's period holding the same instant counts, as a floor, if that
// period holds at least half of this one (the same month or day, shifted
// by the zones' offsets; not the month before, which a zone still counts
// in the hours between the two zones' midnights). Within that, it is the
// stricter reading (everything the other zone counted in its period counts
// in this one, though an hour or so of it may lie outside), and callers
// who alternate zones are held to one count: each carries the other's
// over before it adds its own. Outside it, what the other zone counted in
// the hours of its previous period that overlap this one is not carried:
// at most those hours' admissions more. The floor reaches the regional
// store as a re-seed does (max-merged, so processes that carry the same
// count over do not add it up).

// zoneGroup holds the calendar windows of one identity and unit, one per
// time zone this process decided it in.
type zoneGroup struct {
	mu      sync.Mutex
	windows []*cells.Window
}

// zoneID names a zoneGroup: an identity and a calendar unit.
type zoneID struct {
	workspace, namespace, identifier string
	unit                             calendar.Unit
}

// zoneIDOf returns the group of calendar window w.
func zoneIDOf(w *cells.Window) zoneID {
	k := w.Key()
	return zoneID{k.Workspace, k.Namespace, k.Identifier, k.Period.Calendar().Unit()}
}

// zones holds the zone groups of the table's calendar windows. Most
// identities are decided in one zone; multi counts the groups of more,
// so that a table without any pays one atomic load a calendar decision.
type zones struct {
	groups *xsync.Map[zoneID, *zoneGroup]
	multi  atomic.Int64
}

// add files calendar window w, new in the table, in its group.
func (z *zones) add(w *cells.Window) {
	z.groups.Compute(zoneIDOf(w), func(g *zoneGroup, loaded bool) (*zoneGroup, xsync.ComputeOp) {
		if !loaded {
			g = &zoneGroup{}
		}
		g.mu.Lock()
		g.windows = append(g.windows, w)
		if len(g.windows) == 2 {
			z.multi.Add(1)
		}
		g.mu.Unlock()
		return g, xsync.UpdateOp
	})
}

// remove takes calendar window w, evicted, out of its group.
func (z *zones) remove(w *cells.Window) {
	z.groups.Compute(zoneIDOf(w), func(g *zoneGroup, loaded bool) (*zoneGroup, xsync.ComputeOp) {
		if !loaded {
			return nil, xsync.CancelOp
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		n := len(g.windows)
		g.windows = slices.DeleteFunc(g.windows, func(o *cells.Window) bool { return o == w })
		if n >= 2 && len(g.windows) < 2 {
			z.multi.Add(-1)
		}
		if len(g.windows) == 0 {
			return nil, xsync.DeleteOp
		}
		return g, xsync.CancelOp
	})
}

// eachSibling calls f for the other zones' windows of calendar window w's
// identity and unit, under their group's lock: nothing without a group of
// several zones in the table, at the cost of one atomic load.
func (z *zones) eachSibling(w *cells.Window, f func(*cells.Window)) {
	if z.multi.Load() == 0 {
		return
	}
	g, ok := z.groups.Load(zoneIDOf(w))
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, o := range g.windows {
		if o != w {
			f(o)
		}
	}
}

// carryZones raises the count of calendar window w's cell holding now
// (unix ms) to what each other zone's window of its identity counts in its
// period holding now (see the comment at the top of this file).
func (t *Table) carryZones(w *cells.Window, now int64) {
	if t.zones.multi.Load() == 0 {
		return // no identity is decided in several zones: nothing to carry
	}
	seq, start, end := w.SeqAt(now)
	var floor int64
	t.zones.eachSibling(w, func(o *cells.Window) {
		oseq, ostart, oend := o.SeqAt(now)
		if 2*(min(end, oend)-max(start, ostart)) < end-start {
			return // another period of its calendar than ours, mostly
		}
		if c := o.CellForMerge(oseq, 0); c != nil {
			floor = max(floor, c.Count.Load()+c.Global.Load())
		}
	})
	cur, _ := w.CellAt(seq, t.Regional == nil)
	if cur == nil || floor <= cur.Count.Load()+cur.Global.Load() {
		return
	}
	cells.RaiseTo(&cur.Count, floor-cur.Global.Load())
	if t.Regional != nil {
		cells.AtomicMax(&cur.Stored, floor-cur.Global.Load()-cur.Unreplayed.Load())
		cur.Flags.Or(cells.Reseed)
		t.Regional.QueueReplay(w, cur, 0)
	}
	t.Global.NoteGrowth(w, cur, w.Limit.Load())
}

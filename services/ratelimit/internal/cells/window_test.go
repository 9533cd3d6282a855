package cells

import (
	"testing"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/period"
)

// minuteWindow returns an empty window of one-minute cells.
func minuteWindow() *Window {
	return NewWindow(&Key{Workspace: "ws", Namespace: "n", Identifier: "k", Period: period.OfLength(60_000)})
}

// TestCellBookedAhead: a cell booked ahead waits beside the window's two
// slots, so that the current cell's decisions still find the previous
// cell (a sliding window weighs it), and is the one the next window's
// slot takes when it begins, never a second cell of its sequence.
func TestCellBookedAhead(t *testing.T) {
	w := minuteWindow()
	prev, _ := w.CellAt(4, true)
	cur, _ := w.CellAt(5, true)
	if w.Lookup(6) != nil {
		t.Fatal("a cell ahead before any booking")
	}
	next := w.BookAhead(6, true)
	if next == nil || next.Seq() != 6 || w.Lookup(6) != next || w.BookAhead(6, true) != next {
		t.Fatalf("BookAhead(6) = %v, Ahead(6) = %v: want one cell of 6", next, w.Lookup(6))
	}
	next.Count.Add(3)
	if c, p, newer := w.CellsAt(5, true); c != cur || p != prev || newer != 0 {
		t.Fatalf("CellsAt(5) after booking ahead = %v, %v, %d: want the current and previous cells", c, p, newer)
	}
	if c, _ := w.CellAt(6, true); c != next {
		t.Fatalf("CellAt(6) = %v, want the cell booked ahead", c)
	}
	if c, p, _ := w.CellsAt(6, true); c != next || p != cur || c.Count.Load() != 3 {
		t.Fatalf("CellsAt(6) = %v, %v: want the booked cell, 3, after the current one", c, p)
	}
	if w.BookAhead(6, true) != next || w.BookAhead(5, true) != nil {
		t.Fatal("BookAhead of a window begun: want its cell, and none for an older one")
	}
}

// TestCellBookedAheadOutlivesItsWindow: requests booked into a cell
// proceed without deciding again, so no request may take it into its
// slot while its window lasts; the window after it still weighs it, and
// the janitor keeps it.
func TestCellBookedAheadOutlivesItsWindow(t *testing.T) {
	w := minuteWindow()
	w.CellAt(5, true)
	next := w.BookAhead(6, true)
	next.Count.Add(2)
	if w.Idle(6) {
		t.Fatal("a window with a cell booked ahead is idle")
	}
	if c, p, _ := w.CellsAt(7, true); c == nil || c.Seq() != 7 || p != next {
		t.Fatalf("CellsAt(7) = %v, %v: want a new cell after the one booked ahead", c, p)
	}
	// A cell older than the newest is made apart, and Next keeps the
	// newest.
	old, _ := w.CellAt(3, true)
	if old != nil {
		t.Fatalf("CellAt(3) = %v after the window moved to 7: want none", old)
	}
	if n := w.Next.Load(); n == nil || n.Seq() != 7 {
		t.Fatalf("Next = %v, want the cell of 7", n)
	}
}

// TestCellForACountAhead: a count another process booked into the next
// cell, read or imported before it begins, is made ahead and leaves the
// previous cell's slot alone; one of now's window goes in its slot.
func TestCellForACountAhead(t *testing.T) {
	w := minuteWindow()
	prev, _ := w.CellAt(4, true)
	cur, _ := w.CellAt(5, true)
	now := int64(5*60_000 + 1_000)
	if c := w.CellFor(5, now, true); c != cur {
		t.Fatalf("CellFor(5) = %v, want the current cell", c)
	}
	if w.AheadForMerge(6, 0) != nil {
		t.Fatal("a count of 0 made a cell ahead")
	}
	c := w.CellFor(6, now, true)
	if c == nil || c != w.Lookup(6) || w.AheadForMerge(6, 4) != c {
		t.Fatalf("CellFor(6) = %v, want the cell made ahead", c)
	}
	if _, p, newer := w.CellsAt(5, true); p != prev || newer != 0 {
		t.Fatalf("CellsAt(5) = _, %v, %d after a count ahead: want the previous cell", p, newer)
	}
}

// TestCellBookedAheadKeptWhenTheNextIsBooked: a cell made ahead that no
// request took into its slot while its window lasted keeps its count when
// the cell after it is made ahead too (a count of it read or imported
// before any request of its window came).
func TestCellBookedAheadKeptWhenTheNextIsBooked(t *testing.T) {
	w := minuteWindow()
	w.CellAt(5, true)
	six := w.BookAhead(6, true)
	six.Count.Add(10)
	if w.CellForMerge(6, 0) != six {
		t.Fatal("CellForMerge(6, 0) does not find the cell made ahead")
	}
	seven := w.AheadForMerge(7, 3)
	if seven == nil || seven.Seq() != 7 {
		t.Fatalf("AheadForMerge(7) = %v", seven)
	}
	if c, _ := w.CellAt(6, true); c != six || c.Count.Load() != 10 {
		t.Fatalf("CellAt(6) = %v, want the cell booked ahead with its 10", c)
	}
	if w.Lookup(6) != six {
		t.Fatal("Ahead(6) lost the cell once a newer one was made ahead")
	}
}

package cells

import (
	"testing"
	"unsafe"
)

// TestCellWord checks that flag operations never touch the sequence packed
// beside them, for sequences of both signs and at the edges of 56 bits.
func TestCellWord(t *testing.T) {
	all := Hydrated | Queued | Grown | Reseed | Marked | ToMark | Reserved | Contended
	for _, seq := range []int64{0, 1, -1, 29_000_000, 1_764_000_000_000, seqMask >> 1, -(seqMask >> 1) - 1} {
		c := newCell(seq, true)
		if got := c.Seq(); got != seq {
			t.Fatalf("newCell(%d).seq() = %d", seq, got)
		}
		if got := c.Flags.Load(); got != Hydrated {
			t.Fatalf("seq %d: flags = %b, want hydrated only", seq, got)
		}
		if old := c.Flags.Or(all); old != Hydrated {
			t.Fatalf("seq %d: Or returned %b, want %b", seq, old, Hydrated)
		}
		if got := c.Flags.Load(); got != all {
			t.Fatalf("seq %d: flags after Or = %b, want %b", seq, got, all)
		}
		if old := c.Flags.And(^(Queued | Reseed)); old != all {
			t.Fatalf("seq %d: And returned %b, want %b", seq, old, all)
		}
		if got, want := c.Flags.Load(), all&^(Queued|Reseed); got != want {
			t.Fatalf("seq %d: flags after And = %b, want %b", seq, got, want)
		}
		c.Flags.And(0)
		if got := c.Flags.Load(); got != 0 {
			t.Fatalf("seq %d: flags after And(0) = %b", seq, got)
		}
		if got := c.Seq(); got != seq {
			t.Fatalf("seq %d changed to %d by flag operations", seq, got)
		}
	}
	if n := newCell(5, false).Flags.Load(); n != 0 {
		t.Fatalf("newCell(5, false) flags = %b, want none", n)
	}
	// The cell's size is what BenchmarkMemoryPerCell's budget rests on: 48
	// bytes is a size class, 56 would round up to 64.
	if size := unsafe.Sizeof(Cell{}); size != 48 {
		t.Fatalf("cell is %d bytes, want 48", size)
	}
}

// A window is 80 bytes, the allocator's size class it fills: one field
// more would round it up to 96 (BenchmarkMemoryPerCell's budget).
func TestWindowSize(t *testing.T) {
	if size := unsafe.Sizeof(Window{}); size != 80 {
		t.Fatalf("window is %d bytes, want 80", size)
	}
}

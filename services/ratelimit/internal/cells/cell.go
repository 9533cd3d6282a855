package cells

import (
	"sync/atomic"
)

// Cell is the state of one fixed window cell: one key in one sequence. Every
// field is atomic because the request path, the replay and the global loops
// touch it without locks. 48 bytes.
type Cell struct {
	// Flags holds the fixed window this cell counts (see seq) and the cell's
	// flags: Hydrated, Queued, Grown, Reseed, Marked,
	// ToMark, Reserved and Contended.
	// Sharing one word keeps the cell at 48 bytes, a size class of its own.
	Flags Word
	// Count is this region's count, including speculative batch increments
	// that may still roll back.
	Count atomic.Int64
	// Speculative is the part of count that belongs to batches which have not
	// committed yet. Nothing outside the process may see it.
	Speculative atomic.Int64
	// Global is the sum of the other regions' counts, imported by the global
	// sync loop. The request path only reads it; it is never published.
	Global atomic.Int64
	// Unreplayed is what this process accepted into the cell and has not yet
	// added to the regional store. All accepted requests of one replay
	// interval coalesce here into one command.
	Unreplayed atomic.Int64
	// Stored is the highest count the regional store showed this process
	// for the cell (a replay's answer, or a read): what it knows the store
	// held, and writes back to one that lost its data (the regional
	// tier's merge).
	Stored atomic.Int64
}

// Seq is the fixed window the cell counts (unix ms / duration). It never
// changes: a new window gets a new cell.
func (c *Cell) Seq() int64 { return c.Flags.seq() }

// Word packs a cell's sequence, which never changes, into the low 56 bits
// of one atomic word and its flags into the high 8. Flag operations leave the
// sequence untouched. 56 bits hold any sequence of a clock in milliseconds.
type Word struct{ v atomic.Uint64 }

const (
	flagShift = 56
	seqMask   = 1<<flagShift - 1
)

// init sets the sequence and the flags of a new cell.
func (w *Word) init(seq int64, flags uint32) {
	w.v.Store(uint64(seq)&seqMask | uint64(flags)<<flagShift)
}

// seq returns the sequence, sign-extended.
func (w *Word) seq() int64 { return int64(w.v.Load()<<(64-flagShift)) >> (64 - flagShift) }

// Load returns the flags.
func (w *Word) Load() uint32 { return uint32(w.v.Load() >> flagShift) }

// Or sets the flags in f and returns the old flags.
func (w *Word) Or(f uint32) uint32 { return uint32(w.v.Or(uint64(f)<<flagShift) >> flagShift) }

// And keeps only the flags in f and returns the old flags.
func (w *Word) And(f uint32) uint32 {
	return uint32(w.v.And(uint64(f&0xff)<<flagShift|seqMask) >> flagShift)
}

// Flags of a cell.
const (
	// Hydrated: the cell holds what the regional store knew when it was
	// created, or there is no regional store, or it could not be read (then a
	// background refresh keeps trying). Requests on a cell without it wait for
	// one read of the regional store.
	Hydrated uint32 = 1 << iota
	// Queued: the cell is in the replay queue.
	Queued
	// Grown: the cell is in the queue of the next prompt global flush.
	Grown
	// Reseed: a read found the regional store holding less than this
	// process knows it held (it lost its data): the next replay sends the
	// cell even without an increment, with its floor.
	Reseed
	// Marked: a replay marked the cell in the regional store's index of
	// cells to publish since the last full global flush (see
	// store.Unpublished), which clears it: a cell is marked at most once
	// per full flush interval.
	Marked
	// ToMark: the regional store took a count of the cell at once
	// (slots taken, a release or an extension written through), which no
	// replay sends: the next replay sends the cell even without an
	// increment, to mark it as a replay would (see Marked).
	ToMark
	// Reserved: a reservation was counted into the cell, or refunds of
	// it were seen: decisions weigh it less its refunds, and reads of the
	// regional store fetch those too. Cells without it cost nothing more.
	Reserved
	// Contended: a decision that lost races on the cell's key holds
	// the key's lock (see contention.go); decisions arriving queue on it.
	Contended
	// flagsEnd is the bit after the last flag, not a flag.
	flagsEnd
)

// The flags fit the word's high 8 bits: with a ninth, this does not compile.
const _ = uint8(flagsEnd - 1)

// AtomicMax raises v to n if n is larger, and reports whether it did.
func AtomicMax(v *atomic.Int64, n int64) bool {
	_, raised := RaiseTo(v, n)
	return raised
}

// RaiseTo raises v to n if n is larger, and returns what v held just
// before: n less it is exactly what the raise added.
func RaiseTo(v *atomic.Int64, n int64) (old int64, raised bool) {
	for {
		old = v.Load()
		if n <= old {
			return old, false
		}
		if v.CompareAndSwap(old, n) {
			return old, true
		}
	}
}

// newCell returns an empty cell for seq. Without a regional store there is
// nothing to hydrate from, so the cell starts hydrated.
func newCell(seq int64, hydrated bool) *Cell {
	var flags uint32
	if hydrated {
		flags = Hydrated
	}
	c := &Cell{}
	c.Flags.init(seq, flags)
	return c
}

// maxCount is the most reports take a cell's count to: 2^56, far past any
// limit (at most 2^53), and low enough that the sum of a hundred regions'
// counts still fits an int64. Reports are counted past the limit and
// would otherwise overflow a counter with enough of them; nothing else
// counts past the limit.
const maxCount = 1 << 56

// AddCapped adds cost (at most the largest cost a request may have) to
// c, stopping at maxCount, and returns the new count.
func AddCapped(c *atomic.Int64, cost int64) int64 {
	for {
		old := c.Load()
		n := min(old+cost, max(old, maxCount))
		if n == old || c.CompareAndSwap(old, n) {
			return n
		}
	}
}

// Package period names the cells of a window and does each kind's
// arithmetic: which cell holds an instant, when a cell starts and ends,
// when it can no longer affect a decision. A window's cells are fixed
// periods of one of five kinds:
//
//   - a length: the cells of a sliding or fixed window, one window long;
//   - a calendar: days, ISO weeks, months or years in a time zone;
//   - a token bucket's cells: a power of two of milliseconds long enough
//     to hold the bucket's memory, so that a small change of its rate or
//     burst keeps its cells;
//   - one cell of a concurrency limit's pool: the slots that free
//     themselves at its end, on a grid of a power of two seconds fitted
//     to their lease;
//   - the tokens given back to a token bucket, on its cells' grid: a
//     window of refunds of its own, since the bucket's refunds carry its
//     seed.
//
// A [Period] is a value: comparable, the same whichever call made it. The
// stores know a period only by a number where a window's length would be
// (see the store package's codes); [Period.Code] and [FromCode] are the one
// place the limiter crosses between the two.
package period

import (
	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Kind is what a period's cells are.
type Kind uint8

// The kinds of period. The zero Period has none: it names no cells.
const (
	// Length is a fixed length: cell n spans [n·length, (n+1)·length).
	Length Kind = iota + 1
	// Calendar is a calendar's periods in its time zone, numbered by
	// [calendar.Period.Index].
	Calendar
	// Bucket is a token bucket's cells: a length that is a power of two
	// of milliseconds.
	Bucket
	// Pool is one cell of a concurrency limit's pool: the slots counted
	// in it free themselves at its end.
	Pool
	// Given is the tokens given back to a token bucket, on the grid of
	// its Bucket cells: only ever a refunds window's (see
	// [Period.Given]).
	Given
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Length:
		return "length"
	case Calendar:
		return "calendar"
	case Bucket:
		return "bucket"
	case Pool:
		return "pool"
	case Given:
		return "given"
	}
	return "none"
}

// Period is the cells of a window. The zero value names none; make one
// with [OfLength], [OfCalendar], [BucketCells], [PoolCell] or [ForLease],
// or a bucket's [Period.Given].
type Period struct {
	kind Kind
	// shift is a Bucket's (and a Given's) cell length, 2^shift ms, or a
	// Pool's grid, 2^shift s.
	shift uint8
	// n is a Length's length in ms, or a Pool's cell.
	n   int64
	cal calendar.Period
}

// OfLength returns cells of ms milliseconds (more than 0).
func OfLength(ms int64) Period { return Period{kind: Length, n: ms} }

// OfCalendar returns the periods of c, a calendar New made.
func OfCalendar(c calendar.Period) Period { return Period{kind: Calendar, cal: c} }

// BucketCells returns a token bucket's cells of 2^shift ms, shift from
// store.MinBucketShift to store.MaxBucketShift.
func BucketCells(shift int64) Period { return Period{kind: Bucket, shift: uint8(shift)} }

// Given returns the cells of the tokens given back to the token bucket
// whose cells p is (a Bucket's; any other period names none): the same
// grid, apart in every store, and counted as refunds are (see
// store.GivenCode). Bucket reverses it.
func (p Period) Given() Period {
	if p.kind != Bucket {
		return Period{}
	}
	return Period{kind: Given, shift: p.shift}
}

// Bucket returns the cells of the token bucket whose given tokens p
// counts (a Given's), else p.
func (p Period) Bucket() Period {
	if p.kind != Given {
		return p
	}
	return Period{kind: Bucket, shift: p.shift}
}

// PoolCell returns cell of a pool's grid of 2^shift s (shift from 0 to
// store.MaxPoolShift): the slots that free themselves at cell·2^shift s.
func PoolCell(shift, cell int64) Period { return Period{kind: Pool, shift: uint8(shift), n: cell} }

// OfLease returns cell of the grid of a lease of leaseMs (see
// store.PoolShift): the pool cell a slot of that lease names.
func OfLease(leaseMs, cell int64) Period { return PoolCell(store.PoolShift(leaseMs), cell) }

// ForLease returns the pool cell a slot of a lease of leaseMs taken at
// now (unix ms) is counted in: on the grid of its lease (see
// store.PoolShift), the first cell that ends no earlier than the slot's
// expiry, now+leaseMs. The slot frees itself less than a cell late.
func ForLease(leaseMs, now int64) Period {
	shift := store.PoolShift(leaseMs)
	return PoolCell(shift, store.PoolCellOf(shift, now+leaseMs))
}

// FromCode returns the period a store's key or row names by code, where a
// window's length would be. A calendar's code names one only if this
// process made the calendar (a row holds the code, not the zone): a
// calendar it never decided by reports false, as does a code of no kind.
func FromCode(code int64) (Period, bool) {
	switch {
	case code <= 0:
		return Period{}, false
	case store.IsPoolCode(code):
		shift, cell := store.PoolCodeCell(code)
		return PoolCell(shift, cell), true
	case store.IsBucketCode(code):
		return BucketCells(store.BucketCodeShift(code)), true
	case store.IsGivenCode(code):
		return Period{kind: Given, shift: uint8(store.GivenCodeShift(code))}, true
	case calendar.IsCode(code):
		c, ok := calendar.ByCode(code)
		if !ok {
			return Period{}, false
		}
		return OfCalendar(c), true
	}
	return OfLength(code), true
}

// Code returns the number that names p in the stores' keys and rows
// (see FromCode), where a window's length would be.
func (p Period) Code() int64 {
	switch p.kind {
	case Calendar:
		return p.cal.Code()
	case Bucket:
		return store.BucketCode(int64(p.shift))
	case Given:
		return store.GivenCode(int64(p.shift))
	case Pool:
		return store.PoolCode(int64(p.shift), p.n)
	}
	return p.n
}

// Hash returns a number that differs between periods that differ, but
// for a chance: what a window's key mixes into its hash.
func (p Period) Hash() uint64 {
	h := uint64(p.kind)<<8 | uint64(p.shift)
	if p.kind == Calendar {
		return h ^ uint64(p.cal.Code())<<16
	}
	return h ^ uint64(p.n)<<16 ^ uint64(p.n)>>48
}

// Kind returns p's kind.
func (p Period) Kind() Kind { return p.kind }

// Calendar returns a Calendar period's calendar, else the zero
// calendar.Period.
func (p Period) Calendar() calendar.Period { return p.cal }

// Cell returns a Pool's cell, the only one its window holds.
func (p Period) Cell() int64 { return p.n }

// CellEnd returns when the slots counted in a Pool's cell free
// themselves, in unix ms.
func (p Period) CellEnd() int64 { return store.PoolCellEnd(int64(p.shift), p.n) }

// Ms returns the length of p's cells in ms: a Length's, a Bucket's (and
// a Given's), a Pool's grid; for a Calendar, the shortest period of its unit (a day
// that loses an hour to daylight saving).
func (p Period) Ms() int64 {
	switch p.kind {
	case Calendar:
		return p.cal.Unit().Shortest().Milliseconds()
	case Bucket, Given:
		return 1 << p.shift
	case Pool:
		return 1000 << p.shift
	}
	return p.n
}

// At returns the cell holding now (unix ms), its start and its end. A
// Pool's window holds its own cell until it ends, then the one two past
// it, which holds nothing: every walk of the window's cells then finds it
// idle.
func (p Period) At(now int64) (seq, start, end int64) {
	switch p.kind {
	case Calendar:
		return p.cal.At(now)
	case Pool:
		g := p.Ms()
		seq, end = p.n, p.CellEnd()
		if now >= end {
			seq, end = seq+2, end+2*g
		}
		return seq, end - g, end
	}
	n := p.Ms()
	seq = now / n
	return seq, seq * n, (seq + 1) * n
}

// Start returns the first instant of cell seq, in unix ms. A Pool's
// window is in its cell from a grid before its end.
func (p Period) Start(seq int64) int64 {
	switch p.kind {
	case Calendar:
		return p.cal.Start(seq).UnixMilli()
	case Pool:
		return (seq - 1) * p.Ms()
	}
	return seq * p.Ms()
}

// Holds reports whether cell seq can be made in p's window: every cell but
// a Pool's other than its own, which a read after the cell ended must not
// make again.
func (p Period) Holds(seq int64) bool { return p.kind != Pool || seq == p.n }

// HoldsReservations reports whether every count of p's cells is a
// reservation its release may give back: a token bucket's (whose cells
// carry a seed where a window's carry refunds) and a pool's slots. Every
// decision on such a cell weighs what was given back, and every read of
// the regional store fetches it.
func (p Period) HoldsReservations() bool { return p.kind == Pool || p.kind == Bucket }

// OutlivesCell reports whether what p's cells count lasts past a cell: a
// token bucket's level carries from cell to cell, a pool's slots are held
// for their lease. A window's count starts from zero each window.
func (p Period) OutlivesCell() bool { return p.kind == Pool || p.kind == Bucket }

// Oldest returns the oldest cell that can affect a decision at now (unix
// ms): the previous one, which a sliding window weighs, and for a
// calendar, whose periods are fixed, the current one (a year's would
// otherwise linger a year more). A window with no cell this new is idle.
func (p Period) Oldest(now int64) int64 {
	seq, _, _ := p.At(now)
	if p.kind == Calendar {
		return seq
	}
	return seq - 1
}

// ExpiresAt returns when cell seq can no longer affect a decision, in
// unix ms: what the stores keep it until (see store.ExpiresAt).
func (p Period) ExpiresAt(seq int64) int64 { return store.ExpiresAt(seq, p.Code()) }

// Latest returns the latest cell a healthy clock can be in at now (unix
// ms): the current one and the next, which a clock a little ahead is in;
// for a calendar, in its own zone. A store's row past it is ignored.
func (p Period) Latest(now int64) int64 {
	if p.kind == Calendar {
		seq, _, _ := p.cal.At(now)
		return seq + 1
	}
	return store.LatestSequence(p.Code(), now)
}

// LatestOfCode is Latest of the period a store's code names, for a code
// FromCode does not know (a calendar this process never made): the
// latest cell any zone's clock can be in at now (unix ms).
func LatestOfCode(code, now int64) int64 { return store.LatestSequence(code, now) }

// StrictSpan returns how long after now a key that denied, or admitted
// near its limit, stays strict: a cell's length, and for a calendar the
// rest of the current period.
func (p Period) StrictSpan(now int64) int64 {
	if p.kind == Calendar {
		_, _, end := p.cal.At(now)
		return end - now
	}
	return p.Ms()
}

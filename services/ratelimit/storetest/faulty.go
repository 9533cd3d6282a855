package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// ErrDown is the error of a call that a fault wrapper failed.
var ErrDown = errors.New("store down")

// FaultyRegional wraps any [store.Regional] (in memory, Redis, a Redis
// Cluster) with faults a test switches on, as pebble's errorfs wraps any
// file system: the whole store down (every call fails, as on a dead
// server), one cell bad (its increment fails alone, as a corrupt key's
// does, with a [*store.PartialError]), and an identifier unreachable (its
// cells fail in every call while the others go to the store, as those of
// one dead Redis Cluster master do). A failed cell is not sent to the
// store. Writes can also be lost, applied and answered too late, or
// applied twice (SetWriteFault). Its methods are safe for concurrent use.
type FaultyRegional struct {
	store.Regional
	down        atomic.Bool
	mu          sync.Mutex
	bad         map[store.CellKey]bool
	unreachable map[string]bool // by identifier
	// writeFault, if set, picks the fault of each write (see
	// SetWriteFault).
	writeFault func(store.CellKey) WriteFault
}

// WriteFault is what happens to one write (an increment, or slots taken)
// on its way to the store and back, as a network and a server make it
// happen: see [FaultyRegional.SetWriteFault].
type WriteFault int

// The write faults.
const (
	// WriteOK: the write is applied and answered.
	WriteOK WriteFault = iota
	// WriteLost: the write never reaches the store; the caller is told
	// it failed.
	WriteLost
	// WriteLate: the store applies the write, and its answer comes too
	// late: the caller is told it failed (a reply past its timeout).
	WriteLate
	// WriteTwice: the store applies the write twice (a client that sent
	// it again on a connection it took for dead) and answers the second.
	WriteTwice
)

// NewFaultyRegional returns inner with no fault switched on.
func NewFaultyRegional(inner store.Regional) *FaultyRegional {
	return &FaultyRegional{Regional: inner, bad: map[store.CellKey]bool{}, unreachable: map[string]bool{}}
}

// SetDown switches the whole store off (every call fails with [ErrDown])
// or on again.
func (f *FaultyRegional) SetDown(down bool) { f.down.Store(down) }

// SetBad makes increments of the cell k fail alone, as a corrupt key's do,
// or succeed again.
func (f *FaultyRegional) SetBad(k store.CellKey, bad bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bad[k] = bad
}

// SetUnreachable makes every cell of identifier fail in every call, as the
// keys of one dead server of a cluster do, or be sent again.
func (f *FaultyRegional) SetUnreachable(identifier string, unreachable bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreachable[identifier] = unreachable
}

// SetWriteFault makes pick choose the fault of every write that follows,
// by its cell (nil: no faults): lost, applied but answered as failed, or
// applied twice. Reads are not affected.
func (f *FaultyRegional) SetWriteFault(pick func(store.CellKey) WriteFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writeFault = pick
}

// faultOf returns the fault of a write of k.
func (f *FaultyRegional) faultOf(k store.CellKey) WriteFault {
	f.mu.Lock()
	pick := f.writeFault
	f.mu.Unlock()
	if pick == nil {
		return WriteOK
	}
	return pick(k)
}

// TakeSlots implements [store.SlotTaker] when the wrapped store does,
// failing as an increment of the cell would; with a store without it, it
// fails every call, as a store whose slots cannot be taken atomically.
func (f *FaultyRegional) TakeSlots(ctx context.Context, t store.SlotTake) (store.SlotCounts, error) {
	var out store.SlotCounts
	err := f.slotWrite(t.Key, func(taker store.SlotTaker) (err error) {
		out, err = taker.TakeSlots(ctx, t)
		return err
	})
	if err != nil {
		return store.SlotCounts{}, err
	}
	return out, nil
}

// slotWrite makes write, a call of the wrapped store's slots that writes
// cell k, fail as an increment of k would: down, a bad cell, an
// unreachable identifier, and the write faults (lost, applied but
// answered as failed, applied twice). A store that takes no slots fails.
func (f *FaultyRegional) slotWrite(k store.CellKey, write func(store.SlotTaker) error) error {
	taker, ok := f.Regional.(store.SlotTaker)
	if !ok || f.down.Load() {
		return ErrDown
	}
	f.mu.Lock()
	failed := f.bad[k] || f.unreachable[k.Identifier]
	f.mu.Unlock()
	if failed {
		return ErrDown
	}
	switch f.faultOf(k) {
	case WriteLost:
		return ErrDown
	case WriteLate:
		if err := write(taker); err != nil {
			return err
		}
		return ErrDown
	case WriteTwice:
		if err := write(taker); err != nil {
			return err
		}
	}
	return write(taker)
}

// ReadSlots implements [store.SlotTaker] when the wrapped store does,
// failing as a read of the cell would: when the store is down or the
// key's identifier unreachable; write faults spare it.
func (f *FaultyRegional) ReadSlots(ctx context.Context, k store.CellKey, now int64, writer string) (store.SlotCounts, error) {
	taker, ok := f.Regional.(store.SlotTaker)
	if !ok || f.down.Load() {
		return store.SlotCounts{}, ErrDown
	}
	f.mu.Lock()
	failed := f.unreachable[k.Identifier]
	f.mu.Unlock()
	if failed {
		return store.SlotCounts{}, ErrDown
	}
	return taker.ReadSlots(ctx, k, now, writer)
}

// ReleaseSlots implements [store.SlotTaker] when the wrapped store does,
// failing as an increment of the releases would (see slotWrite).
func (f *FaultyRegional) ReleaseSlots(ctx context.Context, inc store.Increment, now int64) (int64, []store.PoolCell, error) {
	var n int64
	var cells []store.PoolCell
	err := f.slotWrite(inc.Key, func(taker store.SlotTaker) (err error) {
		n, cells, err = taker.ReleaseSlots(ctx, inc, now)
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	return n, cells, nil
}

// Load implements [store.Regional].
func (f *FaultyRegional) Load(ctx context.Context, keys []store.CellKey) ([]int64, error) {
	if f.down.Load() {
		return nil, ErrDown
	}
	f.mu.Lock()
	failed := make([]bool, len(keys))
	for i, k := range keys {
		failed[i] = f.unreachable[k.Identifier]
	}
	f.mu.Unlock()
	return passOn(failed, keys, func(sent []store.CellKey) ([]int64, error) { return f.Regional.Load(ctx, sent) })
}

// Increment implements [store.Regional].
func (f *FaultyRegional) Increment(ctx context.Context, incs []store.Increment) ([]int64, error) {
	if f.down.Load() {
		return nil, ErrDown
	}
	f.mu.Lock()
	failed := make([]bool, len(incs))
	for i, inc := range incs {
		failed[i] = f.bad[inc.Key] || f.unreachable[inc.Key.Identifier]
	}
	f.mu.Unlock()
	var late []bool
	for i, inc := range incs {
		if failed[i] {
			continue
		}
		switch f.faultOf(inc.Key) {
		case WriteLost:
			failed[i] = true
		case WriteLate:
			if late == nil {
				late = make([]bool, len(incs))
			}
			late[i] = true
		case WriteTwice:
			if _, err := f.Regional.Increment(ctx, incs[i:i+1]); err != nil {
				failed[i] = true
			}
		}
	}
	counts, err := passOn(failed, incs, func(sent []store.Increment) ([]int64, error) { return f.Regional.Increment(ctx, sent) })
	if late == nil || counts == nil {
		return counts, err
	}
	// Applied, and answered too late: failed, for the caller.
	for i := range counts {
		if late[i] {
			counts[i] = -1
		}
	}
	return counts, &store.PartialError{Err: ErrDown}
}

// passOn sends the items that did not fail to call and answers every item
// in order: -1 for a failed one, with a [*store.PartialError] if some
// succeeded and [ErrDown] if none did.
func passOn[T any](failed []bool, items []T, call func([]T) ([]int64, error)) ([]int64, error) {
	var sent []T
	for i, it := range items {
		if !failed[i] {
			sent = append(sent, it)
		}
	}
	if len(sent) == len(items) {
		return call(items)
	}
	out := make([]int64, len(items))
	for i := range out {
		out[i] = -1
	}
	if len(sent) == 0 {
		return out, ErrDown
	}
	counts, err := call(sent)
	var partial *store.PartialError
	if err != nil && !errors.As(err, &partial) && counts == nil {
		return nil, err // the store failed the whole call
	}
	j := 0
	for i := range items {
		if failed[i] {
			continue
		}
		if j < len(counts) {
			out[i] = counts[j]
		}
		j++
	}
	return out, &store.PartialError{Err: ErrDown}
}

// FaultyGlobal wraps any [store.Global] (in memory, MySQL) with a fault a
// test switches on: the whole store down, every call failing with
// [ErrDown] before it reaches the store, as on a dead database. Its methods
// are safe for concurrent use.
type FaultyGlobal struct {
	store.Global
	down atomic.Bool
}

// NewFaultyGlobal returns inner with the fault switched off.
func NewFaultyGlobal(inner store.Global) *FaultyGlobal { return &FaultyGlobal{Global: inner} }

// SetDown switches the whole store off or on again.
func (f *FaultyGlobal) SetDown(down bool) { f.down.Store(down) }

// Publish implements [store.Global].
func (f *FaultyGlobal) Publish(ctx context.Context, region string, counts []store.CellCount) (int, error) {
	if f.down.Load() {
		return 0, ErrDown
	}
	return f.Global.Publish(ctx, region, counts)
}

// Sync implements [store.Global].
func (f *FaultyGlobal) Sync(ctx context.Context, region string, now, since time.Time) ([]store.GlobalCount, time.Time, error) {
	if f.down.Load() {
		return nil, time.Time{}, ErrDown
	}
	return f.Global.Sync(ctx, region, now, since)
}

package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// TestRegional checks that the regional stores newStore returns do what the
// limiter relies on: missing cells count 0; increments answer the new
// count, accumulate within a call and across calls, and keep their order
// across many keys; keys that differ in any field, however little, are
// different cells; counts stop at store.MaxCount; concurrent increments are
// never lost; refunds sent as totals per writer give back once however often
// they arrive; a call with a done context fails with an error. Each subtest
// works in a workspace of its own, so the stores may share one server.
func TestRegional(t *testing.T, newStore func(t *testing.T) store.Regional) {
	t.Run("MissingCellsCountZero", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		counts, err := s.Load(context.Background(), []store.CellKey{key(ws, "a", 1), key(ws, "b", 1), key(ws, "a", 2)})
		wantCounts(t, "load", counts, err, []int64{0, 0, 0})
	})
	t.Run("IncrementAnswersTheNewCount", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		ctx := context.Background()
		a, b := key(ws, "a", 1), key(ws, "b", 1)
		counts, err := s.Increment(ctx, []store.Increment{inc(a, 3), inc(b, 5)})
		wantCounts(t, "first increment", counts, err, []int64{3, 5})
		counts, err = s.Increment(ctx, []store.Increment{inc(a, 2)})
		wantCounts(t, "second increment", counts, err, []int64{5})
		counts, err = s.Load(ctx, []store.CellKey{b, a})
		wantCounts(t, "load", counts, err, []int64{5, 5})
	})
	t.Run("TakeSlotsAtomically", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		taker := slotTaker(t, s)
		ctx := context.Background()
		now := time.Now().UnixMilli()
		// The pool holds, on a grid of a second, 4 slots expiring in a
		// minute, 1 of them released; on a grid of 8 s, 100 whose cell
		// ended; the other regions 2 in the cell taken in, on 4 s.
		cur, other, ended := poolCell(ws, 2, now+60_000), poolCell(ws, 0, now+60_000), poolCell(ws, 3, now-8_000)
		otherR := other
		otherR.Refunds = true
		if _, err := s.Increment(ctx, []store.Increment{inc(other, 4), inc(otherR, 1), inc(ended, 100)}); err != nil {
			t.Fatal(err)
		}
		take := store.SlotTake{Key: cur, Cost: 2, Limit: 10, Now: now, Beyond: []store.PoolCell{{Key: cur, Count: 2}},
			TTL: time.Hour, Writer: "a", Total: 2}
		got, err := taker.TakeSlots(ctx, take)
		if err != nil || !got.Taken || len(got.Cells) != 2 || cellOf(got, cur) != [2]int64{2, 0} ||
			cellOf(got, other) != [2]int64{4, 1} || got.Held(nil) != 5 {
			t.Fatalf("first take: %+v, %v; want taken, the two live cells (2, and 4 less 1)", got, err)
		}
		// 5 held and 2 elsewhere: 3 more fit, 4 do not, all or nothing.
		take.Cost, take.Total = 4, 6
		if got, err := taker.TakeSlots(ctx, take); err != nil || got.Taken || cellOf(got, cur)[0] != 2 {
			t.Fatalf("a take past the limit: %+v, %v", got, err)
		}
		// Concurrent takers never share a slot. A take that fails (a
		// loaded machine times out a TLS handshake, and a breaker may
		// open) is tried again: only answers count.
		take.Cost, take.Beyond = 1, nil
		var writers atomic.Int64
		retry := func(call func() error) {
			for range 200 {
				if call() == nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Error("the store kept failing")
		}
		var taken atomic.Int64
		var wg sync.WaitGroup
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				take := take
				take.Writer, take.Total = fmt.Sprintf("w%d", writers.Add(1)), 1
				retry(func() error {
					got, err := taker.TakeSlots(ctx, take)
					if err == nil && got.Taken {
						taken.Add(1)
					}
					return err
				})
			}()
		}
		wg.Wait()
		if taken.Load() != 5 {
			t.Fatalf("10 concurrent takes of 1 with 5 of 10 held took %d, want 5", taken.Load())
		}
		var counts []int64
		retry(func() error {
			var err error
			counts, err = s.Load(ctx, []store.CellKey{cur})
			return err
		})
		wantCounts(t, "the cell after the takes", counts, nil, []int64{7})
	})
	t.Run("TakeSlotsSeeCellsWrittenByReplay", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		taker := slotTaker(t, s)
		ctx := context.Background()
		now := time.Now().UnixMilli()
		// Slots a process counted from memory reach the store by its
		// replay, as totals, on the grid of their lease: a take on
		// another grid weighs them.
		cur, replayed := poolCell(ws, 0, now+5_000), poolCell(ws, 8, now+3_600_000)
		if _, err := s.Increment(ctx, []store.Increment{{Key: replayed, Writer: "p", Total: 3, TTL: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		take := store.SlotTake{Key: cur, Cost: 1, Limit: 3, Now: now, TTL: time.Hour, Writer: "a", Total: 1}
		if got, err := taker.TakeSlots(ctx, take); err != nil || got.Taken || cellOf(got, replayed)[0] != 3 {
			t.Fatalf("a take with 3 of 3 held on another grid: %+v, %v; want refused, the replayed cell answered", got, err)
		}
		// Their release frees them for it.
		released := replayed
		released.Refunds = true
		if _, err := s.Increment(ctx, []store.Increment{{Key: released, Writer: "p", Total: 1, TTL: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		if got, err := taker.TakeSlots(ctx, take); err != nil || !got.Taken || got.Held(nil) != 3 {
			t.Fatalf("a take after one of the 3 was released: %+v, %v; want taken, 3 held", got, err)
		}
	})
	t.Run("TakeSlotsFreedElsewhere", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		taker := slotTaker(t, s)
		// The store counts 2 slots of 2 in the cell; another region
		// released one of them (what is held beyond the store there is
		// -1): one is free, whichever region counted it.
		ctx := context.Background()
		now := time.Now().UnixMilli()
		cur := poolCell(ws, 0, now+60_000)
		if _, err := s.Increment(ctx, []store.Increment{{Key: cur, Writer: "a", Total: 2, TTL: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		take := store.SlotTake{Key: cur, Cost: 1, Limit: 2, Now: now, Beyond: []store.PoolCell{{Key: cur, Count: -1}}, TTL: time.Hour, Writer: "b"}
		for i, want := range []bool{true, false} {
			take.Total = int64(i + 1)
			got, err := taker.TakeSlots(ctx, take)
			if err != nil || got.Taken != want {
				t.Fatalf("take %d: %+v, %v; want taken %v", i, got, err, want)
			}
		}
		// A release beyond the store in another cell frees nothing in
		// this one: each cell is clamped at zero on its own.
		take.Beyond, take.Total = []store.PoolCell{{Key: poolCell(ws, 0, now+30_000), Count: -5}}, 2
		if got, err := taker.TakeSlots(ctx, take); err != nil || got.Taken {
			t.Fatalf("a take with releases of an empty cell: %+v, %v; want refused", got, err)
		}
	})
	t.Run("TakeSlotsOnce", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		taker := slotTaker(t, s)
		ctx := context.Background()
		now := time.Now().UnixMilli()
		cur := poolCell(ws, 0, now+60_000)
		take := func(writer string, total, cost int64) store.SlotCounts {
			t.Helper()
			got, err := taker.TakeSlots(ctx, store.SlotTake{Key: cur, Cost: cost, Limit: 3, Now: now, TTL: time.Hour, Writer: writer, Total: total})
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		// A's take of 1 is applied and its answer lost; A sends it again
		// (the same total): taken, counted once.
		for i := range 2 {
			if got := take("a", 1, 1); !got.Taken || cellOf(got, cur)[0] != 1 {
				t.Fatalf("A's take, sent %d times: %+v; want taken, 1 held", i+1, got)
			}
		}
		// The same total written by A's replay counts nothing more either.
		counts, err := s.Increment(ctx, []store.Increment{{Key: cur, Writer: "a", Total: 1, TTL: time.Hour}})
		wantCounts(t, "A's total written again", counts, err, []int64{1})
		// B takes 2: 3 of 3 held; B's next is refused; A's next (total 2)
		// too, and it counts nothing.
		if got := take("b", 2, 2); !got.Taken || cellOf(got, cur)[0] != 3 {
			t.Fatalf("B's take of 2: %+v; want taken, 3 held", got)
		}
		if got := take("b", 3, 1); got.Taken {
			t.Fatalf("B's take past the limit: %+v; want refused", got)
		}
		if got := take("a", 2, 1); got.Taken || cellOf(got, cur)[0] != 3 {
			t.Fatalf("A's take past the limit: %+v; want refused, 3 held", got)
		}
		// The refused takes wrote nothing.
		counts, err = s.Load(ctx, []store.CellKey{cur})
		wantCounts(t, "the cell", counts, err, []int64{3})
		// A read names what each writer's takes hold: A's total is 1 (its
		// take whose answer was lost was applied; the refused one was
		// not), B's 2, a writer that took nothing none.
		for _, w := range []struct {
			writer string
			want   int64
		}{{"a", 1}, {"b", 2}, {"c", 0}, {"", 0}} {
			read, err := taker.ReadSlots(ctx, cur, now, w.writer)
			if err != nil || read.Written != w.want || read.Taken || read.Held(nil) != 3 {
				t.Fatalf("read for writer %q: %+v, %v; want written %d, 3 held", w.writer, read, err, w.want)
			}
		}
	})
	t.Run("TakeSlotsAtTheLargestLimit", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		taker := slotTaker(t, s)
		// A limit of 2^53 (the largest) with all but one slot held
		// elsewhere: the last slot is taken, and no more (a store that
		// adds in doubles finds 2^53 + 1 = 2^53 and takes every one).
		now := time.Now().UnixMilli()
		cur := poolCell(ws, 0, now+60_000)
		take := store.SlotTake{Key: cur, Cost: 1, Limit: 1 << 53, Now: now, Beyond: []store.PoolCell{{Key: cur, Count: 1<<53 - 1}},
			TTL: time.Hour, Writer: "a"}
		for i, want := range []bool{true, false, false} {
			take.Total = int64(i + 1)
			got, err := taker.TakeSlots(context.Background(), take)
			if err != nil || got.Taken != want {
				t.Fatalf("take %d: %+v, %v; want taken %v", i, got, err, want)
			}
		}
	})
	t.Run("ReleaseSlotsAnswersThePool", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		taker := slotTaker(t, s)
		ctx := context.Background()
		now := time.Now().UnixMilli()
		// 3 slots held in one cell, 2 in another grid's: a release of 2
		// of the first answers the pool after it, every cell, in the
		// step that writes it.
		cur, other := poolCell(ws, 0, now+10_000), poolCell(ws, 8, now+3_600_000)
		if _, err := s.Increment(ctx, []store.Increment{{Key: cur, Writer: "a", Total: 3, TTL: time.Hour},
			{Key: other, Writer: "b", Total: 2, TTL: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		released := cur
		released.Refunds = true
		release := store.Increment{Key: released, Writer: "a/r", Total: 2, TTL: time.Hour}
		for i := range 2 {
			// Sent again (its answer lost): given back once.
			n, cells, err := taker.ReleaseSlots(ctx, release, now)
			counts := store.SlotCounts{Cells: cells}
			if err != nil || n != 2 || cellOf(counts, cur) != [2]int64{3, 2} || cellOf(counts, other) != [2]int64{2, 0} || counts.Held(nil) != 3 {
				t.Fatalf("release %d: %d, %+v, %v; want releases 2, the cell 3 less 2, the other cell 2, 3 held", i+1, n, cells, err)
			}
		}
		// The read answers the same.
		read, err := taker.ReadSlots(ctx, cur, now, "")
		if err != nil || read.Held(nil) != 3 {
			t.Fatalf("read after the release: %+v, %v; want 3 held", read, err)
		}
		// Only a pool cell's releases, written as a total, are released.
		for _, bad := range []store.Increment{{Key: cur, Writer: "a/r", Total: 3, TTL: time.Hour}, {Key: released, Delta: 1, TTL: time.Hour}} {
			if _, _, err := taker.ReleaseSlots(ctx, bad, now); err == nil {
				t.Fatalf("ReleaseSlots(%+v) succeeded; want an error: not the releases of a pool cell as a total", bad)
			}
		}
	})
	t.Run("RefundTotalsGiveBackOnce", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		ctx := context.Background()
		r := poolCell(ws, 0, time.Now().UnixMilli()+60_000)
		r.Refunds = true
		total := func(writer string, n int64) store.Increment {
			return store.Increment{Key: r, Writer: writer, Total: n, TTL: time.Hour}
		}
		// A's total of 3 sent twice (applied, its answer lost, sent again),
		// then B's 2, then an older total of A's arriving late, then A's 5.
		for _, step := range []struct {
			inc  store.Increment
			want int64
		}{{total("a", 3), 3}, {total("a", 3), 3}, {total("b", 2), 5}, {total("a", 1), 5}, {total("a", 5), 7}} {
			counts, err := s.Increment(ctx, []store.Increment{step.inc})
			wantCounts(t, fmt.Sprintf("total %d of %s", step.inc.Total, step.inc.Writer), counts, err, []int64{step.want})
		}
		counts, err := s.Load(ctx, []store.CellKey{r})
		wantCounts(t, "load", counts, err, []int64{7})
		if taker, ok := s.(store.SlotTaker); ok {
			// What TakeSlots weighs is the same sum.
			cur := r
			cur.Refunds = false
			got, err := taker.TakeSlots(ctx, store.SlotTake{Key: cur, Limit: 10, Now: time.Now().UnixMilli(), TTL: time.Hour})
			if err != nil || cellOf(got, cur)[1] != 7 {
				t.Fatalf("TakeSlots read refunds %+v, %v; want 7", got, err)
			}
		}
	})
	t.Run("FloorReseedsWithMaxMerge", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		ctx := context.Background()
		a, b := key(ws, "a", 1), key(ws, "b", 1)
		// An empty store (one restarted without its data) is raised to the
		// floor; one that holds more keeps its count plus the delta.
		withFloor := func(k store.CellKey, delta, floor int64) store.Increment {
			i := inc(k, delta)
			i.Floor = floor
			return i
		}
		counts, err := s.Increment(ctx, []store.Increment{withFloor(a, 1, 81), withFloor(b, 0, 40)})
		wantCounts(t, "increments raised to their floors", counts, err, []int64{81, 40})
		counts, err = s.Increment(ctx, []store.Increment{withFloor(a, 1, 81)})
		wantCounts(t, "a second process's increment with the same floor", counts, err, []int64{82})
		counts, err = s.Increment(ctx, []store.Increment{withFloor(b, 0, 10)})
		wantCounts(t, "a floor under the count", counts, err, []int64{40})
		counts, err = s.Load(ctx, []store.CellKey{a, b})
		wantCounts(t, "load", counts, err, []int64{82, 40})
	})
	t.Run("ACellTwiceInOneCall", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		a := key(ws, "a", 1)
		counts, err := s.Increment(context.Background(), []store.Increment{inc(a, 1), inc(a, 2)})
		wantCounts(t, "increment", counts, err, []int64{1, 3})
	})
	t.Run("KeysThatDifferAreDifferentCells", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		ctx := context.Background()
		keys := distinctKeys(ws)
		incs := make([]store.Increment, len(keys))
		want := make([]int64, len(keys))
		for i, k := range keys {
			incs[i], want[i] = inc(k, int64(i+1)), int64(i+1)
		}
		counts, err := s.Increment(ctx, incs)
		wantCounts(t, "increment", counts, err, want)
		counts, err = s.Load(ctx, keys)
		wantCounts(t, "load", counts, err, want)
	})
	t.Run("OrderAcrossManyKeys", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		ctx := context.Background()
		const n = 300 // over many hash slots of a cluster
		keys := make([]store.CellKey, n)
		incs := make([]store.Increment, n)
		want := make([]int64, n)
		for i := range keys {
			keys[i] = key(ws, fmt.Sprintf("user_%d", i), 7)
			incs[i], want[i] = inc(keys[i], int64(i%17+1)), int64(i%17+1)
		}
		counts, err := s.Increment(ctx, incs)
		wantCounts(t, "increment", counts, err, want)
		slices.Reverse(keys)
		slices.Reverse(want)
		counts, err = s.Load(ctx, keys)
		wantCounts(t, "load", counts, err, want)
	})
	t.Run("CountsStopAtMaxCount", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		ctx := context.Background()
		a := key(ws, "huge", 1)
		counts, err := s.Increment(ctx, []store.Increment{inc(a, store.MaxCount), inc(a, store.MaxCount)})
		wantCounts(t, "increment", counts, err, []int64{store.MaxCount, store.MaxCount})
		counts, err = s.Load(ctx, []store.CellKey{a})
		wantCounts(t, "load", counts, err, []int64{store.MaxCount})
	})
	t.Run("ConcurrentIncrementsAreNeverLost", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		a := key(ws, "hot", 1)
		const writers, each = 8, 50
		var wg sync.WaitGroup
		var answered atomic.Int64
		var lastErr atomic.Value
		for range writers {
			wg.Go(func() {
				for range each {
					if _, err := s.Increment(context.Background(), []store.Increment{inc(a, 1)}); err != nil {
						lastErr.Store(err)
					} else {
						answered.Add(1)
					}
				}
			})
		}
		wg.Wait()
		// Every answered increment is counted. One that failed may or may
		// not have landed: on a loaded machine a TLS handshake or a reply
		// can outlast the call's timeout, so it bounds the count only from
		// above; most must be answered.
		if answered.Load() < writers*each/2 {
			t.Fatalf("%d of %d increments answered; the last failure: %v", answered.Load(), writers*each, lastErr.Load())
		}
		counts, err := s.Load(context.Background(), []store.CellKey{a})
		if err != nil || len(counts) != 1 || counts[0] < answered.Load() || counts[0] > writers*each {
			t.Fatalf("load: %v, %v; want from %d (answered) to %d (sent)", counts, err, answered.Load(), writers*each)
		}
	})
	t.Run("ADoneContextFails", func(t *testing.T) {
		s, ws := newStore(t), workspace(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Load(ctx, []store.CellKey{key(ws, "a", 1)}); err == nil {
			t.Error("load with a cancelled context: no error")
		}
		if counts, err := s.Increment(ctx, []store.Increment{inc(key(ws, "a", 1), 1)}); err == nil {
			t.Errorf("increment with a cancelled context: no error, counts %v", counts)
		}
		counts, err := s.Load(context.Background(), []store.CellKey{key(ws, "a", 1)})
		if err != nil {
			t.Fatalf("load after the cancelled calls: %v", err)
		}
		if counts[0] > 1 {
			t.Errorf("a cancelled increment of 1 left count %d", counts[0])
		}
	})
}

// workspace returns a workspace no other test uses.
func workspace(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "ws_" + hex.EncodeToString(b[:])
}

// key is a cell of a one-minute window in the current minute, so that a
// store that expires cells keeps it for the whole test.
func key(ws, identifier string, offset int64) store.CellKey {
	return store.CellKey{Workspace: ws, Namespace: "api", Identifier: identifier, Duration: time.Minute,
		Sequence: time.Now().UnixMilli()/time.Minute.Milliseconds() + offset - 1}
}

func inc(k store.CellKey, delta int64) store.Increment {
	return store.Increment{Key: k, Delta: delta, TTL: time.Hour}
}

// distinctKeys returns cells that differ from the first in one field each,
// however little: trailing spaces, case, separators that could run
// together, braces that name a cluster's hash tag, accents, and the
// cell's refunds.
func distinctKeys(ws string) []store.CellKey {
	base := key(ws, "alice", 1)
	with := func(f func(k *store.CellKey)) store.CellKey {
		k := base
		f(&k)
		return k
	}
	return []store.CellKey{
		base,
		with(func(k *store.CellKey) { k.Identifier = "alice " }),
		with(func(k *store.CellKey) { k.Identifier = "Alice" }),
		with(func(k *store.CellKey) { k.Identifier = "{alice}" }),
		with(func(k *store.CellKey) { k.Identifier = "alice}" }),
		with(func(k *store.CellKey) { k.Identifier = "alicé" }),
		with(func(k *store.CellKey) { k.Namespace = "api:alice"; k.Identifier = "" }),
		with(func(k *store.CellKey) { k.Namespace = "ap"; k.Identifier = "i:alice" }),
		with(func(k *store.CellKey) { k.Workspace = ws + ":api"; k.Namespace = "" }),
		with(func(k *store.CellKey) { k.Duration = time.Minute + time.Millisecond }),
		with(func(k *store.CellKey) { k.Sequence++ }),
		with(func(k *store.CellKey) { k.Refunds = true }),
	}
}

// wantCounts fails t unless a call answered want without an error.
func wantCounts(t *testing.T, call string, counts []int64, err error, want []int64) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	if !slices.Equal(counts, want) {
		t.Fatalf("%s: counts %v, want %v", call, counts, want)
	}
}

// slotTaker returns s as a [store.SlotTaker], or skips the test: a store
// without it takes no slots, and the limiter decides them from memory.
func slotTaker(t *testing.T, s store.Regional) store.SlotTaker {
	t.Helper()
	taker, ok := s.(store.SlotTaker)
	if !ok {
		t.Skip("the store takes no slots: the limiter decides them from memory")
	}
	return taker
}

// poolCell returns the cell of a concurrency limit of workspace ws on
// grid shift that slots expiring at expires (unix ms) are counted in.
func poolCell(ws string, shift, expires int64) store.CellKey {
	k := key(ws, "pool", 1)
	k.Sequence = store.PoolCellOf(shift, expires)
	k.Duration = time.Duration(store.PoolCode(shift, k.Sequence)) * time.Millisecond
	return k
}

// cellOf returns the count and the refunds an answer gave for cell k.
func cellOf(c store.SlotCounts, k store.CellKey) [2]int64 {
	for _, cell := range c.Cells {
		if cell.Key == k {
			return [2]int64{cell.Count, cell.Refunds}
		}
	}
	return [2]int64{-1, -1}
}

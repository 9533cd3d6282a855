package store_test

import (
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// TestPoolCodes: a pool cell's code is neither a length, a calendar's nor
// a bucket's, names its grid and its cell, and a lease's grid is the
// largest power of two seconds within a tenth of it, so that a slot frees
// itself less than a second, or a tenth of its lease, after it expires.
func TestPoolCodes(t *testing.T) {
	for _, tc := range []struct{ leaseMs, shift int64 }{
		{1000, 0}, {19_000, 0}, {20_000, 1}, {39_999, 1}, {40_000, 2}, {60_000, 2}, {2_559_999, 7}, {2_560_000, 8}, {3_600_000, 8},
	} {
		if got := store.PoolShift(tc.leaseMs); got != tc.shift {
			t.Errorf("PoolShift(%d) = %d, want %d", tc.leaseMs, got, tc.shift)
		}
	}
	const now = 1_700_000_000_123
	for lease := int64(store.MinLeaseMs); lease <= store.MaxLeaseMs; lease += 997 {
		shift := store.PoolShift(lease)
		cell := store.PoolCellOf(shift, now+lease)
		end := store.PoolCellEnd(shift, cell)
		if late := end - (now + lease); late < 0 || late >= max(1000, lease/10) {
			t.Fatalf("lease %d ms: its slot frees itself %d ms after it expires", lease, late)
		}
		code := store.PoolCode(shift, cell)
		if !store.IsPoolCode(code) || calendar.IsCode(code) || store.IsBucketCode(code) || store.IsPoolCode(lease) {
			t.Fatalf("code %d of lease %d: IsPoolCode %v, a calendar's %v, a bucket's %v", code, lease,
				store.IsPoolCode(code), calendar.IsCode(code), store.IsBucketCode(code))
		}
		if s, c := store.PoolCodeCell(code); s != shift || c != cell {
			t.Fatalf("PoolCodeCell(%d) = %d, %d; want %d, %d", code, s, c, shift, cell)
		}
		if got := store.CellLength(code); got != 1000<<shift {
			t.Fatalf("CellLength(%d) = %d, want the grid", code, got)
		}
		if store.ExpiresAt(cell, code) <= end || store.LatestSequence(code, now) < cell {
			t.Fatalf("lease %d: the cell is dropped at %d, before it ends (%d), or lies past the latest (%d)",
				lease, store.ExpiresAt(cell, code), end, store.LatestSequence(code, now))
		}
		if time.Duration(code)*time.Millisecond <= 0 {
			t.Fatalf("code %d overflows a Duration", code)
		}
	}
	// A lease's code of earlier versions (2^42 plus the lease) is none.
	if store.IsPoolCode(1<<42 + 60_000) {
		t.Fatal("an earlier version's lease code reads as a pool cell's")
	}
}

// TestBucketCodes: a bucket's code, and the code of the tokens given
// back to it, is neither a length, a pool cell's, a calendar's nor the
// other, and names cells of its power of two of ms.
func TestBucketCodes(t *testing.T) {
	for shift := int64(store.MinBucketShift); shift <= store.MaxBucketShift; shift++ {
		code, given := store.BucketCode(shift), store.GivenCode(shift)
		if !store.IsBucketCode(code) || store.IsPoolCode(code) || calendar.IsCode(code) || store.IsGivenCode(code) {
			t.Fatalf("code %d: IsBucketCode %v, IsPoolCode %v, a calendar's %v, IsGivenCode %v",
				code, store.IsBucketCode(code), store.IsPoolCode(code), calendar.IsCode(code), store.IsGivenCode(code))
		}
		if !store.IsGivenCode(given) || store.IsBucketCode(given) || store.IsPoolCode(given) || calendar.IsCode(given) {
			t.Fatalf("given code %d: IsGivenCode %v, IsBucketCode %v, IsPoolCode %v, a calendar's %v",
				given, store.IsGivenCode(given), store.IsBucketCode(given), store.IsPoolCode(given), calendar.IsCode(given))
		}
		if store.GivenCodeShift(given) != shift {
			t.Fatalf("GivenCodeShift(GivenCode(%d)) = %d", shift, store.GivenCodeShift(given))
		}
		for _, c := range []int64{code, given} {
			if got := store.CellLength(c); got != 1<<shift {
				t.Fatalf("CellLength(%d) = %d, want %d", c, got, int64(1)<<shift)
			}
			if d := time.Duration(c) * time.Millisecond; d.Milliseconds() != c {
				t.Fatalf("code %d does not fit a time.Duration", c)
			}
		}
	}
	if store.IsBucketCode(1 << 35) {
		t.Fatal("a length of 2^35 ms is taken for a bucket's code")
	}
}

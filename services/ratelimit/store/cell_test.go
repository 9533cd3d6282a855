package store_test

import (
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// TestLeaseCodes: a lease's code is neither a length nor a calendar's, and
// its cells expire and run ahead as a window of the lease's length does.
func TestLeaseCodes(t *testing.T) {
	const lease = 30_000
	code := store.LeaseCode(lease)
	if !store.IsLeaseCode(code) || store.IsLeaseCode(lease) || calendar.IsCode(code) {
		t.Fatalf("code %d: IsLeaseCode %v, of the lease itself %v, a calendar's %v",
			code, store.IsLeaseCode(code), store.IsLeaseCode(lease), calendar.IsCode(code))
	}
	if got := store.CellLength(code); got != lease {
		t.Fatalf("CellLength(code) = %d, want %d", got, lease)
	}
	if got := store.CellLength(lease); got != lease {
		t.Fatalf("CellLength(%d) = %d", lease, got)
	}
	if got, want := store.ExpiresAt(100, code), store.ExpiresAt(100, lease); got != want {
		t.Fatalf("ExpiresAt with the code %d, with the length %d", got, want)
	}
	if got, want := store.LatestSequence(code, 1_700_000_000_000), store.LatestSequence(lease, 1_700_000_000_000); got != want {
		t.Fatalf("LatestSequence with the code %d, with the length %d", got, want)
	}
	if store.IsLeaseCode(store.LeaseCode(store.MaxLeaseMs) + 1) {
		t.Fatal("a code past the longest lease is a lease's")
	}
}

// TestBucketCodes: a bucket's code is neither a length, a lease's nor a
// calendar's, and names cells of its power of two of ms.
func TestBucketCodes(t *testing.T) {
	for shift := int64(store.MinBucketShift); shift <= store.MaxBucketShift; shift++ {
		code := store.BucketCode(shift)
		if !store.IsBucketCode(code) || store.IsLeaseCode(code) || calendar.IsCode(code) {
			t.Fatalf("code %d: IsBucketCode %v, IsLeaseCode %v, a calendar's %v",
				code, store.IsBucketCode(code), store.IsLeaseCode(code), calendar.IsCode(code))
		}
		if got := store.CellLength(code); got != 1<<shift {
			t.Fatalf("CellLength(BucketCode(%d)) = %d, want %d", shift, got, int64(1)<<shift)
		}
		if d := time.Duration(code) * time.Millisecond; d.Milliseconds() != code {
			t.Fatalf("code %d does not fit a time.Duration", code)
		}
	}
	if store.IsBucketCode(1 << 35) {
		t.Fatal("a length of 2^35 ms is taken for a bucket's code")
	}
}

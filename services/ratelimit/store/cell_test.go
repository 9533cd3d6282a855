package store_test

import (
	"testing"

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

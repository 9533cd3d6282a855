package calendar_test

import (
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
)

// TestBoundsPastTheZoneDatabase: beyond the last transition the zone
// database lists (2037), a zone's clock follows its rule string, which
// package time reads back as spans that may not move on; the bounds of a
// period there are still found, in order. (A month starting 2041-01-01 in
// Berlin once looped for ever.)
func TestBoundsPastTheZoneDatabase(t *testing.T) {
	for _, zone := range []string{"Europe/Berlin", "America/Santiago", "Australia/Lord_Howe", "Asia/Gaza", ""} {
		for _, unit := range []calendar.Unit{calendar.Day, calendar.Month, calendar.Year} {
			p := must(t, unit, zone)
			for _, y := range []int{2036, 2038, 2041, 2100, 2500} {
				at := time.Date(y, 1, 1, 12, 0, 0, 0, time.UTC)
				done := make(chan [2]time.Time, 1)
				go func() { _, start, end := p.Bounds(at); done <- [2]time.Time{start, end} }()
				select {
				case b := <-done:
					if at.Before(b[0]) || !at.Before(b[1]) {
						t.Errorf("%s in %q: %s not within %s to %s", unit, zone, at, b[0], b[1])
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("%s in %q: the bounds of %s were not found", unit, zone, at)
				}
			}
		}
	}
}

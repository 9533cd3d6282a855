package ratelimit

import (
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// monthIn returns a request of a monthly quota of 100 in zone.
func monthIn(t *testing.T, zone string) Request {
	t.Helper()
	p, err := calendar.New(calendar.Month, zone)
	if err != nil {
		t.Fatal(err)
	}
	r := req("user", 100, 0, 1)
	r.Duration, r.Calendar = 0, p
	return r
}

// TestCalendarZoneIsAParameter: a monthly quota of 100 spent in UTC is
// spent when it is sent in Europe/Berlin in the same month, and back: in
// one process, and in a second that reads it cold after the first decided
// in Berlin. Before, the zone named another quota: 100 more admitted.
func TestCalendarZoneIsAParameter(t *testing.T) {
	for _, cold := range []bool{false, true} {
		clock := newFakeClock(time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC).UnixMilli())
		o := storetest.NewMemRegional()
		a := newRegional(t, o, clock)
		utc, berlin := monthIn(t, ""), monthIn(t, "Europe/Berlin")
		for i := range 100 {
			if !mustLimit(t, a.Service, utc).Success {
				t.Fatalf("UTC request %d of 100 denied", i)
			}
		}
		s := a.Service
		if cold {
			check := berlin
			check.Cost = 0
			mustLimit(t, a.Service, check)
			a.tick()
			s = newRegional(t, o, clock).Service
		}
		admitted := 0
		for range 100 {
			if mustLimit(t, s, berlin).Success {
				admitted++
			}
		}
		if admitted != 0 {
			t.Fatalf("second process %v: %d admitted in Berlin after the month's 100 were spent in UTC", cold, admitted)
		}
		if !cold {
			// And back: Berlin's count (the UTC month's, carried over) holds in UTC.
			if resp := mustLimit(t, a.Service, utc); resp.Success {
				t.Fatalf("UTC admitted after both zones spent the month: %+v", resp)
			}
		}
	}
}

// TestCalendarZoneCarriesOnlyTheSamePeriod: a zone's period takes the
// count of the other zone's period only where that one holds most of it:
// spent in UTC in October, Berlin's November (from 23:00 UTC on October
// 31) admits in the hour UTC is still in October, and holds it to one
// count from then on (before this carried over, nothing did; a floor kept
// from UTC's October would have denied Berlin all November).
func TestCalendarZoneCarriesOnlyTheSamePeriod(t *testing.T) {
	clock := newFakeClock(time.Date(2026, 10, 31, 21, 0, 0, 0, time.UTC).UnixMilli())
	s := newTestService(t, clock)
	utc, berlin := monthIn(t, ""), monthIn(t, "Europe/Berlin")
	for range 100 {
		mustLimit(t, s, utc)
	}
	clock.Set(time.Date(2026, 10, 31, 23, 30, 0, 0, time.UTC).UnixMilli()) // November in Berlin, October in UTC
	for i := range 10 {
		if resp := mustLimit(t, s, berlin); !resp.Success {
			t.Fatalf("Berlin's November denied request %d, spent in UTC's October: %+v", i, resp)
		}
	}
	clock.Set(time.Date(2026, 11, 1, 0, 30, 0, 0, time.UTC).UnixMilli()) // November in both
	admitted := 0
	for range 200 {
		for _, r := range []Request{utc, berlin} {
			if mustLimit(t, s, r).Success {
				admitted++
			}
		}
	}
	if admitted != 90 {
		t.Fatalf("callers alternating the zones in November admitted %d after Berlin's first 10, want 90", admitted)
	}
}

// TestZoneGroupsLeaveWithTheirWindows: the janitor's evictions take a
// calendar's windows out of their zone group, so that the table holds no
// group of windows it no longer has, and a table without identities in
// several zones pays one load a decision again.
func TestZoneGroupsLeaveWithTheirWindows(t *testing.T) {
	clock := newFakeClock(time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC).UnixMilli())
	s := newTestService(t, clock)
	mustLimit(t, s, monthIn(t, ""))
	mustLimit(t, s, monthIn(t, "Europe/Berlin"))
	if got, _ := s.windows.ZoneCounts(); got != 1 {
		t.Fatalf("%d identities in several zones, want 1", got)
	}
	clock.Set(time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	if n := s.windows.EvictIdle(clock.Now()); n != 2 {
		t.Fatalf("evicted %d windows, want both months'", n)
	}
	if got, groups := s.windows.ZoneCounts(); got != 0 || groups != 0 {
		t.Fatalf("after eviction: %d identities in several zones, %d groups; want none", got, groups)
	}
}

// TestCalendarZoneCarriedInABatch: an all-or-nothing batch decides a
// calendar's entry as Limit does, with what the identity's period counted
// in other zones: a monthly quota of 100 spent in UTC denies a batch that
// holds the same quota in Europe/Berlin, and counts nothing of the batch.
// Before the models were units, a batch skipped the other zones and
// admitted 100 more.
func TestCalendarZoneCarriedInABatch(t *testing.T) {
	clock := newFakeClock(time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC).UnixMilli())
	s := newTestService(t, clock)
	utc, berlin := monthIn(t, ""), monthIn(t, "Europe/Berlin")
	for i := range 100 {
		if !mustLimit(t, s, utc).Success {
			t.Fatalf("UTC request %d of 100 denied", i)
		}
	}
	other := req("other", 10, time.Minute, 1)
	resp, err := s.MultiLimit(t.Context(), []Request{other, berlin})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Passed || resp.Results[1].Success {
		t.Fatalf("a batch admitted Berlin's month after UTC's spent it: %+v", resp)
	}
	if r := mustLimit(t, s, other); r.Remaining != 9 {
		t.Fatalf("the denied batch counted its other entry: %d of 10 left after one request, want 9", r.Remaining)
	}
}

package calendar_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
)

func must(t *testing.T, unit calendar.Unit, zone string) calendar.Period {
	t.Helper()
	p, err := calendar.New(unit, zone)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPeriodLengths: the periods of the wall clock, across the changes of
// Berlin's clocks (a day of 23 and one of 25 hours), February in a common
// and a leap year, and the years themselves.
func TestPeriodLengths(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		unit  calendar.Unit
		zone  string
		at    time.Time
		start time.Time
		hours float64
	}{
		{calendar.Day, "Europe/Berlin", time.Date(2026, 3, 29, 12, 0, 0, 0, berlin), time.Date(2026, 3, 29, 0, 0, 0, 0, berlin), 23},
		{calendar.Day, "Europe/Berlin", time.Date(2026, 10, 25, 23, 59, 0, 0, berlin), time.Date(2026, 10, 25, 0, 0, 0, 0, berlin), 25},
		{calendar.Day, "Europe/Berlin", time.Date(2026, 10, 26, 0, 0, 0, 0, berlin), time.Date(2026, 10, 26, 0, 0, 0, 0, berlin), 24},
		{calendar.Day, "", time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC), time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), 24},
		{calendar.Month, "Europe/Berlin", time.Date(2026, 2, 14, 9, 0, 0, 0, berlin), time.Date(2026, 2, 1, 0, 0, 0, 0, berlin), 28 * 24},
		{calendar.Month, "Europe/Berlin", time.Date(2028, 2, 29, 23, 0, 0, 0, berlin), time.Date(2028, 2, 1, 0, 0, 0, 0, berlin), 29 * 24},
		{calendar.Month, "Europe/Berlin", time.Date(2026, 3, 31, 0, 0, 0, 0, berlin), time.Date(2026, 3, 1, 0, 0, 0, 0, berlin), 31*24 - 1},
		{calendar.Year, "", time.Date(2028, 7, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC), 366 * 24},
		{calendar.Year, "Europe/Berlin", time.Date(2026, 12, 31, 23, 59, 59, 0, berlin), time.Date(2026, 1, 1, 0, 0, 0, 0, berlin), 365 * 24},
		// 2026-01-01 is a Thursday: its week began on Monday 2025-12-29.
		{calendar.Week, "", time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC), time.Date(2025, 12, 29, 0, 0, 0, 0, time.UTC), 7 * 24},
		{calendar.Week, "Europe/Berlin", time.Date(2026, 3, 29, 23, 0, 0, 0, berlin), time.Date(2026, 3, 23, 0, 0, 0, 0, berlin), 7*24 - 1},
	} {
		p := must(t, tc.unit, tc.zone)
		_, start, end := p.Bounds(tc.at)
		if !start.Equal(tc.start) || end.Sub(start).Hours() != tc.hours {
			t.Errorf("%s in %q at %s: %s to %s (%v h), want from %s, %v h", tc.unit, tc.zone, tc.at, start, end, end.Sub(start).Hours(), tc.start, tc.hours)
		}
		if tc.at.Before(start) || !tc.at.Before(end) {
			t.Errorf("%s at %s: not within %s to %s", tc.unit, tc.at, start, end)
		}
	}
}

// TestIndexesAreConsecutive: walking an hour at a time through four years
// (two changes of the clocks a year, a leap year), a period's index grows
// by one exactly when its start is passed, and each instant lies in its
// period's bounds.
func TestIndexesAreConsecutive(t *testing.T) {
	for _, zone := range []string{"", "Europe/Berlin", "America/Santiago", "Australia/Lord_Howe", "Pacific/Kiritimati"} {
		for _, unit := range []calendar.Unit{calendar.Day, calendar.Week, calendar.Month, calendar.Year} {
			p := must(t, unit, zone)
			t0 := time.Date(2025, 12, 25, 0, 0, 0, 0, time.UTC)
			prev, _, _ := p.Bounds(t0)
			for at := t0; at.Before(t0.AddDate(4, 0, 0)); at = at.Add(time.Hour) {
				i, start, end := p.Bounds(at)
				if at.Before(start) || !at.Before(end) {
					t.Fatalf("%s in %q: %s is not within its period %d, %s to %s", unit, zone, at, i, start, end)
				}
				if i != prev && i != prev+1 {
					t.Fatalf("%s in %q: index %d after %d at %s", unit, zone, i, prev, at)
				}
				if p.Index(start) != i || p.Index(end.Add(-time.Nanosecond)) != i || p.Index(end) != i+1 {
					t.Fatalf("%s in %q: period %d, %s to %s, does not index its own instants", unit, zone, i, start, end)
				}
				prev = i
			}
		}
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		unit calendar.Unit
		zone string
		want string
	}{
		{0, "", "unit: must be day, week, month or year"},
		{calendar.Day, "Mars/Olympus_Mons", `time_zone: "Mars/Olympus_Mons" is not a time zone`},
		{calendar.Day, "Local", `time_zone: "Local" is not a time zone`},
		{calendar.Day, strings.Repeat("x", 65), "time_zone: must be at most 64 bytes"},
	} {
		if _, err := calendar.New(tc.unit, tc.zone); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%v, %q) = %v, want an error containing %q", tc.unit, tc.zone, err, tc.want)
		}
	}
}

func Example() {
	month, _ := calendar.New(calendar.Month, "Europe/Berlin")
	_, start, reset := month.Bounds(time.Date(2026, 2, 14, 9, 30, 0, 0, time.UTC))
	fmt.Println(start, "until", reset)
	// Output: 2026-02-01 00:00:00 +0100 CET until 2026-03-01 00:00:00 +0100 CET
}

// TestCodes: a Period's code is the same for the same unit and zone, apart
// for others, never a window's length, held by a time.Duration of
// milliseconds, and names its unit; LatestEnd and EarliestIndex bound the
// period of any zone from the code alone, zones 14 hours ahead of UTC and
// 11 behind included.
func TestCodes(t *testing.T) {
	zones := []string{"", "Europe/Berlin", "America/Santiago", "Pacific/Kiritimati", "Pacific/Pago_Pago",
		"Asia/Kolkata", "Australia/Lord_Howe", "America/St_Johns", "Asia/Kathmandu"}
	seen := map[int64]string{}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, unit := range []calendar.Unit{calendar.Day, calendar.Week, calendar.Month, calendar.Year} {
		for _, zone := range zones {
			p, err := calendar.New(unit, zone)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := calendar.New(unit, zone)
			if p != again {
				t.Fatalf("%v %q: two calls made two Periods", unit, zone)
			}
			c := p.Code()
			if other, dup := seen[c]; dup {
				t.Fatalf("%v %q has the code of %s", unit, zone, other)
			}
			seen[c] = unit.String() + " " + zone
			if !calendar.IsCode(c) || calendar.IsCode(366*24*3600*1000) || calendar.UnitOfCode(c) != unit ||
				time.Duration(c)*time.Millisecond/time.Millisecond != time.Duration(c) {
				t.Fatalf("%v %q: code %d", unit, zone, c)
			}
			for at := start; at.Before(start.AddDate(1, 0, 0)); at = at.Add(31 * time.Hour) {
				i, s, e := p.At(at.UnixMilli())
				wi, ws, we := p.Bounds(at)
				if i != wi || s != ws.UnixMilli() || e != we.UnixMilli() {
					t.Fatalf("%v %q at %v: At %d %d %d, Bounds %d %v %v", unit, zone, at, i, s, e, wi, ws, we)
				}
				if calendar.LatestEnd(c, i) < e || calendar.EarliestIndex(c, at.UnixMilli()) > i {
					t.Fatalf("%v %q at %v: LatestEnd %d before the end %d, or EarliestIndex %d after %d",
						unit, zone, at, calendar.LatestEnd(c, i), e, calendar.EarliestIndex(c, at.UnixMilli()), i)
				}
			}
		}
	}
}

// TestZeroPeriod: the zero Period, no calendar, answers its accessors
// instead of panicking: no unit, UTC.
func TestZeroPeriod(t *testing.T) {
	var p calendar.Period
	if !p.IsZero() || p.Unit() != 0 || p.TimeZone() != "" {
		t.Fatalf("the zero Period: zero %v, unit %v, zone %q", p.IsZero(), p.Unit(), p.TimeZone())
	}
}

// TestDaysWhoseMidnightIsOdd: where the clocks go back over midnight (Asia/
// Gaza, 2009 to 2021) the day starts at its first midnight; where they
// skip a whole day (Pacific/Apia, 2011-12-30) the periods stay in order,
// the skipped one empty. Checked against package time every 5 minutes
// through each year: every instant lies in its period, periods do not
// overlap or run backwards, and a period starts at the first instant of
// its date, never later (the instant before it is of an earlier date).
func TestDaysWhoseMidnightIsOdd(t *testing.T) {
	for _, tc := range []struct {
		zone  string
		years []int
	}{{"Asia/Gaza", []int{2009, 2010, 2011, 2012, 2013, 2014, 2015, 2016, 2017, 2018, 2019, 2020, 2021}}, {"Pacific/Apia", []int{2011}}} {
		p := must(t, calendar.Day, tc.zone)
		loc, err := time.LoadLocation(tc.zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, year := range tc.years {
			from := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC)
			for at := from; at.Before(from.AddDate(1, 0, 0)); at = at.Add(5 * time.Minute) {
				i, start, end := p.Bounds(at)
				if at.Before(start) || !at.Before(end) {
					t.Fatalf("%s: %s (%s there) is not within its day %d, %s to %s", tc.zone, at, at.In(loc), i, start.In(loc), end.In(loc))
				}
				y, m, d := at.In(loc).Date()
				if got := p.Start(i); !got.Equal(start) {
					t.Fatalf("%s: day %d starts at %s and at %s", tc.zone, i, got, start)
				}
				before := start.Add(-time.Nanosecond).In(loc)
				if by, bm, bd := before.Date(); by == y && bm == m && bd == d {
					t.Fatalf("%s: day %d-%02d-%02d starts at %s, but %s is of that date already", tc.zone, y, m, d, start.In(loc), before)
				}
				if next := p.Start(i + 2); next.Before(end) {
					t.Fatalf("%s: day %d ends at %s, after the start of the day after next, %s", tc.zone, i, end.In(loc), next.In(loc))
				}
			}
		}
	}
	// The two named in the report: Gaza's 2018-10-27 starts at its first
	// midnight, 00:00 +03:00; Apia's skipped 2011-12-30 ends where it starts.
	gaza := must(t, calendar.Day, "Asia/Gaza")
	i, start, _ := gaza.Bounds(time.Date(2018, 10, 27, 12, 0, 0, 0, time.UTC))
	if want := time.Date(2018, 10, 26, 21, 0, 0, 0, time.UTC); !start.Equal(want) {
		t.Errorf("Gaza's 2018-10-27 (day %d) starts at %s, want its first midnight, %s", i, start.UTC(), want)
	}
	apia := must(t, calendar.Day, "Pacific/Apia")
	i, _, end := apia.Bounds(time.Date(2011, 12, 30, 9, 0, 0, 0, time.UTC)) // 2011-12-29 23:00 there
	if skipped := apia.Start(i + 1); !skipped.Equal(end) || !apia.Start(i+2).Equal(end) {
		t.Errorf("Apia's 2011-12-30: day %d ends %s, the skipped day starts %s and ends %s", i, end, skipped, apia.Start(i+2))
	}
}

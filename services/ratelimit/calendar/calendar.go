// Package calendar is the arithmetic of calendar periods — days, weeks,
// months and years as a time zone's wall clock counts them — for limits
// sold that way ("10,000 a month, reset on the 1st", "1,000 a day from
// midnight in Europe/Berlin"), where a period is not a fixed number of
// milliseconds: a Berlin day lasts 23 or 25 hours when the clocks change,
// February 28 or 29 days, a year 365 or 366.
//
// A Period names its periods by an index that grows by one from each
// period to the next, whatever their lengths, so that a counter per period
// can be keyed by it as a fixed window's cells are by their start.
package calendar

import (
	"errors"
	"fmt"
	"time"
	_ "time/tzdata" // time zones in a binary on a system without its database (a distroless image)
)

// Unit is the length of a period.
type Unit int

// The units. Weeks start on Monday (ISO 8601).
const (
	Day Unit = iota + 1
	Week
	Month
	Year
)

// String names the unit.
func (u Unit) String() string {
	switch u {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	case Year:
		return "year"
	}
	return fmt.Sprintf("Unit(%d)", int(u))
}

// MaxTimeZoneLength bounds a time zone's name: the IANA database's longest
// is 32 bytes.
const MaxTimeZoneLength = 64

// Period is a calendar unit in a time zone. Its zero value is not valid:
// make one with New.
type Period struct {
	unit     Unit
	location *time.Location
}

// ErrUnit is the error of a unit that is not one of Day, Week, Month and
// Year.
var ErrUnit = errors.New("must be day, week, month or year")

// New returns the periods of unit in the IANA time zone named timeZone
// ("Europe/Berlin"; "" or "UTC" for UTC). An unknown zone is an error
// that names it.
func New(unit Unit, timeZone string) (Period, error) {
	if unit < Day || unit > Year {
		return Period{}, fmt.Errorf("unit: %w, got %d", ErrUnit, int(unit))
	}
	if len(timeZone) > MaxTimeZoneLength {
		return Period{}, fmt.Errorf("time_zone: must be at most %d bytes, got %d", MaxTimeZoneLength, len(timeZone))
	}
	loc := time.UTC
	if timeZone != "" {
		l, err := time.LoadLocation(timeZone)
		if err != nil || timeZone == "Local" {
			return Period{}, fmt.Errorf("time_zone: %q is not a time zone of the IANA database (such as Europe/Berlin or UTC)", timeZone)
		}
		loc = l
	}
	return Period{unit: unit, location: loc}, nil
}

// Index returns the number of the period holding t: consecutive periods
// have consecutive indexes (days, weeks, months or years since those of
// 1970-01-01 in the zone, counted on its calendar).
func (p Period) Index(t time.Time) int64 {
	y, m, d := t.In(p.location).Date()
	switch p.unit {
	case Day:
		return days(y, m, d)
	case Week:
		// 1969-12-29, a Monday, is day -3: weeks count from it.
		return floorDiv(days(y, m, d)+3, 7)
	case Month:
		return int64(y)*12 + int64(m) - 1 - 1970*12
	default:
		return int64(y) - 1970
	}
}

// Start returns the first instant of the period of index i: its first
// day's midnight on the zone's clock (or the first instant of that day
// where the clocks skip midnight).
func (p Period) Start(i int64) time.Time {
	switch p.unit {
	case Day:
		return p.midnight(civil(i))
	case Week:
		return p.midnight(civil(i*7 - 3))
	case Month:
		y, m := floorDiv(i+1970*12, 12), i+1970*12-floorDiv(i+1970*12, 12)*12
		return p.midnight(int(y), time.Month(m+1), 1)
	default:
		return p.midnight(int(i+1970), time.January, 1)
	}
}

// Bounds returns the period holding t: its index, its start and the start
// of the next period (its reset).
func (p Period) Bounds(t time.Time) (index int64, start, end time.Time) {
	i := p.Index(t)
	return i, p.Start(i), p.Start(i + 1)
}

// midnight is the first instant of a local date.
func (p Period) midnight(y int, m time.Month, d int) time.Time {
	t := time.Date(y, m, d, 0, 0, 0, 0, p.location)
	if t.Day() != d {
		// Midnight did not exist (the clocks skipped it, forward from
		// 23:xx): time.Date normalised into the day before. The day starts
		// at its first instant, found from noon.
		t = time.Date(y, m, d, 12, 0, 0, 0, p.location)
		for back := t.Add(-time.Hour); back.Day() == d; back = back.Add(-time.Hour) {
			t = back
		}
	}
	return t
}

// days returns the days from 1970-01-01 to the date (Howard Hinnant's
// days_from_civil).
func days(y int, m time.Month, d int) int64 {
	yy := int64(y)
	if m <= 2 {
		yy--
	}
	era := floorDiv(yy, 400)
	yoe := yy - era*400
	mp := (int64(m) + 9) % 12
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civil is the date n days after 1970-01-01 (civil_from_days).
func civil(n int64) (int, time.Month, int) {
	z := n + 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if m > 12 {
		m -= 12
	}
	y := yoe + era*400
	if m <= 2 {
		y++
	}
	return int(y), time.Month(m), int(d)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

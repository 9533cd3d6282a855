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
	"hash/fnv"
	"sync"
	"sync/atomic"
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

// Shortest returns a period of u as short as a zone's daylight saving
// makes it: the unit's length less an hour (February for a month). It is
// a scale for what depends on a window's length only roughly (how often a
// strict window reads its store, whether a window is long enough to
// publish its presence), never a period's bounds, which [Period.At] gives.
func (u Unit) Shortest() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case Day:
		return day - time.Hour
	case Week:
		return 7*day - time.Hour
	case Month:
		return 28*day - time.Hour
	case Year:
		return 365*day - time.Hour
	}
	return 0
}

// MaxTimeZoneLength bounds a time zone's name: the IANA database's longest
// is 32 bytes.
const MaxTimeZoneLength = 64

// Period is a calendar unit in a time zone. Its zero value is not valid:
// make one with New. Periods are comparable: two of the same unit and zone
// are equal, whichever call to New made them.
type Period struct {
	s *period
}

// period is what New shares between every Period of one unit and zone: the
// zone, the period's code, and the bounds of the period last asked for, so
// that a limiter deciding many keys of one calendar computes the wall clock
// once a period rather than once a decision.
type period struct {
	unit     Unit
	zone     string
	location *time.Location
	code     int64
	last     atomic.Pointer[bounds]
}

// bounds is one period: its index and its first instant and the next
// period's, in unix ms.
type bounds struct {
	index, startMs, endMs int64
}

// periods holds every Period New made, by unit and zone: at most four units
// times the zones of the IANA database (about 600), since New refuses any
// other name before it stores one.
var periods sync.Map // periodName -> *period

type periodName struct {
	unit Unit
	zone string
}

// ErrUnit is the error of a unit that is not one of Day, Week, Month and
// Year.
var ErrUnit = errors.New("must be day, week, month or year")

// New returns the periods of unit in the IANA time zone named timeZone
// ("Europe/Berlin"; "" or "UTC" for UTC). An unknown zone is an error
// that names it. The zone is loaded once per process: later calls for the
// same unit and zone return the same Period without reading the database.
func New(unit Unit, timeZone string) (Period, error) {
	if unit < Day || unit > Year {
		return Period{}, fmt.Errorf("unit: %w, got %d", ErrUnit, int(unit))
	}
	if timeZone == "UTC" {
		timeZone = ""
	}
	if p, ok := periods.Load(periodName{unit, timeZone}); ok {
		return Period{p.(*period)}, nil
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
	p := &period{unit: unit, zone: timeZone, location: loc, code: code(unit, timeZone)}
	actual, loaded := periods.LoadOrStore(periodName{unit, timeZone}, p)
	if !loaded {
		byCode.LoadOrStore(p.code, p)
	}
	return Period{actual.(*period)}, nil
}

// byCode holds the same Periods by their code.
var byCode sync.Map // int64 -> *period

// ByCode returns the Period whose code is code, if this process made it
// with New: what a store's row, which holds the code and not the zone,
// names.
func ByCode(code int64) (Period, bool) {
	if p, ok := byCode.Load(code); ok {
		return Period{p.(*period)}, true
	}
	return Period{}, false
}

// IsZero reports whether p is the zero Period: no calendar.
func (p Period) IsZero() bool { return p.s == nil }

// Unit returns p's unit; 0, no unit, for the zero Period.
func (p Period) Unit() Unit {
	if p.s == nil {
		return 0
	}
	return p.s.unit
}

// TimeZone returns the name of p's zone, "" for UTC and for the zero
// Period.
func (p Period) TimeZone() string {
	if p.s == nil {
		return ""
	}
	return p.s.zone
}

// Code returns the number that stands for p's periods where a fixed
// window's length in milliseconds would (the stores' keys and rows): at
// least [MinCode], so never a length, and the same in every process for
// the same unit and zone. See [LatestEnd].
func (p Period) Code() int64 { return p.s.code }

// MinCode is the least [Period.Code]: 2^40 ms is 34 years, longer than
// any window, and every code is under 2^41 ms, which a time.Duration still
// holds.
const MinCode = 1 << 40

// code is MinCode, the unit in bits 37 to 39 and 37 bits of a hash of the
// zone's name: two zones share a code with a chance of one in 10^11 a
// pair, and then only keys named alike in both would share counts.
func code(unit Unit, zone string) int64 {
	h := fnv.New64a()
	h.Write([]byte(zone))
	return MinCode | int64(unit)<<37 | int64(h.Sum64()&(1<<37-1))
}

// IsCode reports whether ms is a Period's code rather than a length: at
// least MinCode, under twice it, naming a unit. Anything else at or above
// MinCode (a corrupt row) is neither, and is taken as a length.
func IsCode(ms int64) bool {
	u := UnitOfCode(ms)
	return ms >= MinCode && ms < 2*MinCode && u >= Day && u <= Year
}

// UnitOfCode returns the unit of a Period's code.
func UnitOfCode(code int64) Unit { return Unit(code >> 37 & 7) }

// At returns the period holding the instant of unix ms now: its index,
// its start and the next period's start (its reset), in unix ms. A call
// within the period asked for last costs two comparisons.
func (p Period) At(now int64) (index, startMs, endMs int64) {
	if b := p.s.last.Load(); b != nil && now >= b.startMs && now < b.endMs {
		return b.index, b.startMs, b.endMs
	}
	i, start, end := p.Bounds(time.UnixMilli(now))
	b := &bounds{index: i, startMs: start.UnixMilli(), endMs: end.UnixMilli()}
	p.s.last.Store(b)
	return b.index, b.startMs, b.endMs
}

// LatestEnd returns, in unix ms, an instant no earlier than the end of
// the period of index i of the unit the code names, whatever its zone:
// the end of that period in UTC and a day more (no zone's clock is a day
// off UTC). Stores keep a cell of the period until then without knowing
// its zone.
func LatestEnd(code int64, i int64) int64 {
	p, _ := New(UnitOfCode(code), "")
	return p.Start(i+1).UnixMilli() + 24*time.Hour.Milliseconds()
}

// EarliestIndex returns an index no greater than that of the period
// holding unix ms now in the unit the code names, whatever its zone: the
// UTC index less one.
func EarliestIndex(code int64, now int64) int64 {
	p, _ := New(UnitOfCode(code), "")
	i, _, _ := p.At(now)
	return i - 1
}

// Index returns the number of the period holding t: consecutive periods
// have consecutive indexes (days, weeks, months or years since those of
// 1970-01-01 in the zone, counted on its calendar).
func (p Period) Index(t time.Time) int64 {
	y, m, d := t.In(p.s.location).Date()
	switch p.s.unit {
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
	switch p.s.unit {
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

// midnight is the first instant of a local date: the first instant whose
// date on the zone's clock is that date or later. Where the clocks go back
// over midnight (Asia/Gaza, 2018-10-27: 01:00 back to 00:00), midnight
// occurs twice and the day starts at the first; where they skip it, the
// day starts at its first instant; where they skip the whole day
// (Pacific/Apia, 2011-12-30), it starts where the next one does, so that
// periods stay in order (that day holds no instant, and no index names
// it). time.Date alone picks either of two midnights, and normalises one
// that never occurs into another day.
func (p Period) midnight(y int, m time.Month, d int) time.Time {
	want := days(y, m, d)
	wall := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() // the date's midnight as if in UTC
	// Walk the zone's spans of one offset around the date (no offset is
	// more than a day off UTC): in each, midnight falls at wall less the
	// offset, if that instant lies in the span; where the date begins at
	// a span's start, the span's start is its first instant.
	var first time.Time
	at := time.Unix(wall-36*3600, 0).In(p.s.location)
	for range 8 { // a few spans at most: no zone changes its clock hourly
		if at.Unix() >= wall+36*3600 {
			break
		}
		start, end := at.ZoneBounds()
		_, offset := at.Zone()
		if c := time.Unix(wall-int64(offset), 0).In(p.s.location); inSpan(c, start, end) {
			first = earliest(first, c)
		}
		if !start.IsZero() && localDays(start) >= want && localDays(start.Add(-time.Nanosecond)) < want {
			first = earliest(first, start.In(p.s.location))
		}
		if end.IsZero() || !end.After(at) {
			break
		}
		at = end.In(p.s.location)
	}
	if first.IsZero() {
		// No span found (a zone without transitions near the date is one
		// span, found above): the date's midnight as time.Date has it.
		return time.Date(y, m, d, 0, 0, 0, 0, p.s.location)
	}
	return first
}

// inSpan reports whether t lies in the span [start, end) of ZoneBounds,
// whose zero values mean the beginning and the end of time.
func inSpan(t, start, end time.Time) bool {
	return (start.IsZero() || !t.Before(start)) && (end.IsZero() || t.Before(end))
}

// earliest returns the earlier of a (zero: none yet) and b.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// localDays returns the days from 1970-01-01 to t's date on its clock.
func localDays(t time.Time) int64 {
	y, m, d := t.Date()
	return days(y, m, d)
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

package rlsconfig

import (
	"strings"
	"time"
)

// Unit is the period of a rule's limit. The values are those of Envoy's
// RateLimitResponse.RateLimit.Unit, so an adapter converts by number.
type Unit int32

// The units envoyproxy/ratelimit accepts.
const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
	UnitMonth   Unit = 5
	UnitYear    Unit = 6
	UnitWeek    Unit = 7
)

var unitNames = map[string]Unit{
	"second": UnitSecond, "minute": UnitMinute, "hour": UnitHour, "day": UnitDay,
	"week": UnitWeek, "month": UnitMonth, "year": UnitYear,
}

// parseUnit reads a unit as the file spells it, in any case.
func parseUnit(s string) (Unit, bool) {
	u, ok := unitNames[strings.ToLower(s)]
	return u, ok
}

// Duration is the unit's length, as envoyproxy/ratelimit counts it: a month
// is 30 days and a year 365, whatever the calendar says.
func (u Unit) Duration() time.Duration {
	switch u {
	case UnitSecond:
		return time.Second
	case UnitMinute:
		return time.Minute
	case UnitHour:
		return time.Hour
	case UnitDay:
		return 24 * time.Hour
	case UnitWeek:
		return 7 * 24 * time.Hour
	case UnitMonth:
		return 30 * 24 * time.Hour
	case UnitYear:
		return 365 * 24 * time.Hour
	}
	return 0
}

// String returns the unit's name in Envoy's spelling: SECOND, MINUTE, …
func (u Unit) String() string {
	for name, v := range unitNames {
		if v == u {
			return strings.ToUpper(name)
		}
	}
	return "UNKNOWN"
}

// UnitOf returns the unit whose length is d, or UnitUnknown.
func UnitOf(d time.Duration) Unit {
	for _, u := range unitNames {
		if u.Duration() == d {
			return u
		}
	}
	return UnitUnknown
}

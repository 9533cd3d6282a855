package rlsconfig

import (
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
)

// Limit is one limit of a rule: RequestsPerUnit hits per UnitMultiplier
// units (or per calendar period), in a window of its own, counted by its
// model.
type Limit struct {
	// RequestsPerUnit is the limit; 0 is always over it.
	RequestsPerUnit uint32
	Unit            Unit
	// UnitMultiplier is how many units the window spans: at least 1.
	UnitMultiplier uint32
	// Name is the limit's name from its file, "" for none: echoed in
	// Envoy's current_limit.
	Name string
	// Algorithm is how the limit counts; a sliding window by default.
	Algorithm ratelimit.Algorithm
	// Burst is a token bucket's capacity; 0 for RequestsPerUnit.
	Burst int64
	// Calendar, when not zero, makes the windows its periods: Unit is
	// then the Envoy unit that names them, and Duration zero.
	Calendar calendar.Period
}

// Duration is the length of the limit's window: its unit's, as
// envoyproxy/ratelimit counts units (see Unit.Duration), times its
// multiplier; zero for a calendar's periods.
func (l Limit) Duration() time.Duration {
	if !l.Calendar.IsZero() {
		return 0
	}
	return l.Unit.Duration() * time.Duration(max(l.UnitMultiplier, 1))
}

// Model names how the limit counts: "sliding_window", "fixed_window",
// "token_bucket", "concurrency" or "calendar".
func (l Limit) Model() string {
	if !l.Calendar.IsZero() {
		return "calendar"
	}
	return l.Algorithm.String()
}

// window names the limit's window among its rule's: its length, or its
// calendar's code.
func (l Limit) window() int64 {
	if !l.Calendar.IsZero() {
		return l.Calendar.Code()
	}
	return l.Duration().Milliseconds()
}

// describe says which window the limit counts in, for errors.
func (l Limit) describe() string {
	if !l.Calendar.IsZero() {
		zone := l.Calendar.TimeZone()
		if zone == "" {
			zone = "UTC"
		}
		return "a " + l.Calendar.Unit().String() + " in " + zone
	}
	return l.Duration().String()
}

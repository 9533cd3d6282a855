package ratelimit

import "time"

// Clock tells the time. The limiter reads it once per decision; tests inject
// a clock they can move by hand.
type Clock interface {
	Now() time.Time
}

// systemClock is the wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

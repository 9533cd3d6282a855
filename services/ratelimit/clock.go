package ratelimit

import "time"

// Clock tells the time. The limiter reads it once per decision and for
// every schedule of its loops; tests inject a clock they can move by hand.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock: [time.Now].
type SystemClock struct{}

// Now returns [time.Now].
func (SystemClock) Now() time.Time { return time.Now() }

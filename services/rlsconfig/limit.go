package rlsconfig

import "time"

// Limit is one limit of a rule: RequestsPerUnit hits per UnitMultiplier
// units, in a window of its own.
type Limit struct {
	// RequestsPerUnit is the limit; 0 is always over it.
	RequestsPerUnit uint32
	Unit            Unit
	// UnitMultiplier is how many units the window spans: at least 1.
	UnitMultiplier uint32
	// Name is the limit's name from its file, "" for none: echoed in
	// Envoy's current_limit.
	Name string
}

// Duration is the length of the limit's window: its unit's, as
// envoyproxy/ratelimit counts units (see Unit.Duration), times its
// multiplier.
func (l Limit) Duration() time.Duration {
	return l.Unit.Duration() * time.Duration(max(l.UnitMultiplier, 1))
}

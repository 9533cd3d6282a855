package rlqsenvoy

import "time"

// SkewedDemand is what each of ten Envoys of a fleet asks a second, at a
// moment at into a minute, in the measurements of a quota server: Envoy 0
// ten times what each other asks (20 a second against 2), Envoy 9 silent
// for the first half of each minute and then bursting at 10 a second;
// about 2,460 a minute together.
func SkewedDemand(envoy int, at time.Duration) float64 {
	switch {
	case envoy == 0:
		return 20
	case envoy == 9 && at%time.Minute < 30*time.Second:
		return 0
	case envoy == 9:
		return 10
	}
	return 2
}

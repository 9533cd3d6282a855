package store

import (
	"cmp"
	"slices"
	"time"
)

// Sums, for a store that adds up rows itself (in memory, or rows a query
// returned at a finer granularity): Series, Top and Namespaces answer
// through them alike.

// AddPoint adds passed, denied and shadow-denied decisions to the point of
// sums that starts at start (unix ms), creating it.
func AddPoint(sums map[int64]*Point, start, passed, denied, shadowDenied int64) {
	p, ok := sums[start]
	if !ok {
		p = &Point{Start: time.UnixMilli(start)}
		sums[start] = p
	}
	p.Passed += passed
	p.Denied += denied
	p.ShadowDenied += shadowDenied
}

// AddIdentifier adds passed, denied and shadow-denied decisions to key's
// entry of sums, creating it.
func AddIdentifier(sums map[string]*Identifier, key string, passed, denied, shadowDenied int64) {
	it, ok := sums[key]
	if !ok {
		it = &Identifier{Identifier: key}
		sums[key] = it
	}
	it.Passed += passed
	it.Denied += denied
	it.ShadowDenied += shadowDenied
}

// SortedPoints returns the points of sums, oldest first.
func SortedPoints(sums map[int64]*Point) []Point {
	out := make([]Point, 0, len(sums))
	for _, p := range sums {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Point) int { return a.Start.Compare(b.Start) })
	return out
}

// Rank returns up to n identifiers of sums, the most denied first, then the
// most shadow-denied, then the busiest, then by name.
func Rank(sums map[string]*Identifier, n int) []Identifier {
	out := make([]Identifier, 0, len(sums))
	for _, it := range sums {
		out = append(out, *it)
	}
	slices.SortFunc(out, func(a, b Identifier) int {
		return cmp.Or(cmp.Compare(b.Denied, a.Denied), cmp.Compare(b.ShadowDenied, a.ShadowDenied),
			cmp.Compare(b.Passed+b.Denied, a.Passed+a.Denied),
			cmp.Compare(a.Identifier, b.Identifier))
	})
	return out[:min(n, len(out))]
}

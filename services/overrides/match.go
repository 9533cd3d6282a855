package overrides

import (
	"cmp"
	"strings"
)

// specificity orders patterns: more characters besides *, then fewer *,
// then byte order of the pattern. compareSpecificity(a, b) < 0 when a is
// more specific.
func compareSpecificity(a, b string) int {
	wa, wb := strings.Count(a, string(wildcard)), strings.Count(b, string(wildcard))
	return cmp.Or(
		cmp.Compare(len(b)-wb, len(a)-wa), // more literal bytes first
		cmp.Compare(wa, wb),
		strings.Compare(a, b),
	)
}

// match reports whether s matches pattern, where * matches any run of bytes.
// It runs in O(len(s)·len(pattern)) at worst: on a mismatch it moves back to
// the latest * only, never further.
func match(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == wildcard:
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == wildcard {
		p++
	}
	return p == len(pattern)
}

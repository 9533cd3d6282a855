// Package spelling finds, for a name someone wrote that is none of the
// names a program knows, the known name nearest to it: what an error
// suggests for a misspelled setting, variable or enum value.
package spelling

// nearest returns the name of names nearest to name, the first in name
// order of those equally near, and how near: the fewest insertions,
// deletions and substitutions of a byte that turn one into the other.
func nearest(name string, names []string) (best string, edits int) {
	edits = -1
	for _, n := range names {
		if d := distance(name, n); edits < 0 || d < edits || d == edits && n < best {
			best, edits = n, d
		}
	}
	return best, edits
}

// Near returns the name of names nearest to name if it is near enough to
// be a misspelling of it: one edit away, two for a name of ten letters or
// more (an edit inserts, deletes or replaces a byte). Past that a guess
// misleads more than it helps.
func Near(name string, names []string) (string, bool) {
	best, edits := nearest(name, names)
	return best, edits >= 0 && edits <= min(2, max(1, len(name)/5))
}

// distance is the Levenshtein distance between a and b: the fewest
// insertions, deletions and substitutions of one byte that turn a into b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

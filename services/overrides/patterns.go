package overrides

import (
	"cmp"
	"slices"
	"strings"
)

// Bounds on patterns. Every decision in a namespace looks at the patterns
// that could match its identifier, so the patterns a tenant may create are
// bounded by what a decision may cost.
const (
	// DefaultMaxPatternsPerNamespace is how many live patterns one
	// namespace may hold.
	DefaultMaxPatternsPerNamespace = 1000
	// MaxWildcards is the most * one pattern may hold: matching is linear
	// in the identifier for each literal run between them.
	MaxWildcards = 4
	// MaxFloatingPatterns is the most patterns of a namespace that begin
	// and end with * (such as *bot*). They have no literal prefix or suffix
	// to be found by, so every decision of the namespace tries each of
	// them: 32 cost about a microsecond on a short identifier.
	MaxFloatingPatterns = 32
)

// pattern is an override's pattern split at its *: the literal prefix and
// suffix, and the literal runs between them that must appear in order.
type pattern struct {
	o              *Override
	prefix, suffix string
	middle         []string
	exact          bool // no *: prefix is the whole identifier
}

func compilePattern(o *Override) *pattern {
	parts := strings.Split(o.Identifier, string(wildcard))
	if len(parts) == 1 { // no *: the identifier itself
		return &pattern{o: o, prefix: o.Identifier, exact: true}
	}
	p := &pattern{o: o, prefix: parts[0], suffix: parts[len(parts)-1]}
	for _, m := range parts[1 : len(parts)-1] {
		if m != "" {
			p.middle = append(p.middle, m)
		}
	}
	return p
}

// floating reports whether p has neither a literal prefix nor a literal
// suffix.
func (p *pattern) floating() bool { return p.prefix == "" && p.suffix == "" }

// match reports whether s matches p: the prefix and suffix in place, and
// each run between them found after the one before. Taking each run's
// first occurrence is never wrong, as * matches anything in between, so
// one pass over s (strings.Index per run) decides.
func (p *pattern) match(s string) bool {
	if p.exact {
		return s == p.prefix
	}
	if len(s) < len(p.prefix)+len(p.suffix) || !strings.HasPrefix(s, p.prefix) || !strings.HasSuffix(s, p.suffix) {
		return false
	}
	mid := s[len(p.prefix) : len(s)-len(p.suffix)]
	for _, m := range p.middle {
		i := strings.Index(mid, m)
		if i < 0 {
			return false
		}
		mid = mid[i+len(m):]
	}
	return true
}

// patternIndex finds the patterns that could match an identifier without
// looking at the others. Each pattern is filed under its longer literal
// end: its prefix (then only identifiers that begin with it are tried) or
// its suffix; floating ones are tried for every identifier. An index is
// never changed once published.
type patternIndex struct {
	byPrefix, bySuffix     map[string][]*pattern
	prefixLens, suffixLens []int // the distinct lengths filed, ascending
	floating               []*pattern
}

func newPatternIndex(patterns map[string]*Override) *patternIndex {
	x := &patternIndex{byPrefix: map[string][]*pattern{}, bySuffix: map[string][]*pattern{}}
	for _, o := range patterns {
		p := compilePattern(o)
		switch {
		case p.floating():
			x.floating = append(x.floating, p)
		case len(p.prefix) >= len(p.suffix):
			x.byPrefix[p.prefix] = append(x.byPrefix[p.prefix], p)
			x.prefixLens = append(x.prefixLens, len(p.prefix))
		default:
			x.bySuffix[p.suffix] = append(x.bySuffix[p.suffix], p)
			x.suffixLens = append(x.suffixLens, len(p.suffix))
		}
	}
	slices.Sort(x.prefixLens)
	x.prefixLens = slices.Compact(x.prefixLens)
	slices.Sort(x.suffixLens)
	x.suffixLens = slices.Compact(x.suffixLens)
	return x
}

// lookup returns the most specific pattern that matches s, or nil: one map
// read per distinct literal length filed (no more than s is long), and a
// match of each pattern found there and each floating one.
func (x *patternIndex) lookup(s string) *Override {
	var best *pattern
	try := func(ps []*pattern) {
		for _, p := range ps {
			if p.match(s) && (best == nil || compareSpecificity(p.o.Identifier, best.o.Identifier) < 0) {
				best = p
			}
		}
	}
	for _, n := range x.prefixLens {
		if n > len(s) {
			break
		}
		try(x.byPrefix[s[:n]])
	}
	for _, n := range x.suffixLens {
		if n > len(s) {
			break
		}
		try(x.bySuffix[s[len(s)-n:]])
	}
	try(x.floating)
	if best == nil {
		return nil
	}
	return best.o
}

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

package overrides

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// match reports whether s matches pattern, where * matches any run of bytes
// (see pattern.match).
func match(pattern, s string) bool { return compilePattern(&Override{Identifier: pattern}).match(s) }

// TestPatternIndexAgreesWithAScan: for random patterns and identifiers
// over a small alphabet (so that many match), the index finds the same
// override as trying every pattern in order of specificity.
func TestPatternIndexAgreesWithAScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int, alphabet string) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for round := range 200 {
		patterns := map[string]*Override{}
		for range 1 + rng.IntN(40) {
			p := word(1+rng.IntN(6), "ab*")
			if strings.Trim(p, "*") == "" || !isPattern(p) || strings.Count(p, "*") > MaxWildcards {
				continue
			}
			patterns[p] = &Override{Identifier: p}
		}
		x := newPatternIndex(patterns)
		for range 50 {
			s := word(rng.IntN(8), "ab")
			var want *Override
			for _, o := range patterns {
				if match(o.Identifier, s) && (want == nil || compareSpecificity(o.Identifier, want.Identifier) < 0) {
					want = o
				}
			}
			if got := x.lookup(s); got != want {
				t.Fatalf("round %d: lookup(%q) over %d patterns = %v, want %v", round, s, len(patterns), got, want)
			}
		}
	}
}

// TestMatchIsGlob checks the matcher on the cases a backtracking one gets
// wrong or slow.
func TestMatchIsGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"*ab*ab", "xabyab", true},
		{"*ab*ab", "xab", false},
		{"a*b*c*d", "abcd", true},
		{"a*b*c*d", "adcb", false},
		{"*" + strings.Repeat("a", 50) + "*b", strings.Repeat("a", 255), false},
	} {
		if got := match(tc.pattern, tc.s); got != tc.want {
			t.Errorf("match(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// TestPatternBounds: a pattern may hold at most MaxWildcards *; a namespace
// at most its cap of patterns and MaxFloatingPatterns floating ones;
// exact overrides do not count against either.
func TestPatternBounds(t *testing.T) {
	s := newRegistry(t, WithMaxPatternsPerNamespace(40))
	ctx := context.Background()
	put := func(ns, id string) error {
		_, err := s.Set(ctx, Override{Workspace: "ws", Namespace: ns, Identifier: id, Limit: 1, Duration: time.Minute})
		return err
	}
	if err := put("ns", "a*b*c*d*e*f"); err == nil || !strings.Contains(err.Error(), "at most 4 *") {
		t.Fatalf("five *: %v, want refused", err)
	}
	for i := range MaxFloatingPatterns {
		if err := put("ns", fmt.Sprint("*bot", i, "*")); err != nil {
			t.Fatal(err)
		}
	}
	var pe *PatternCapacityError
	if err := put("ns", "*one-more*"); !errors.As(err, &pe) || !pe.Floating {
		t.Fatalf("floating pattern %d: %v, want a PatternCapacityError", MaxFloatingPatterns+1, err)
	}
	for i := range 40 - MaxFloatingPatterns {
		if err := put("ns", fmt.Sprint("user_", i, "_*")); err != nil {
			t.Fatal(err)
		}
	}
	if err := put("ns", "user_x*"); !errors.As(err, &pe) || pe.Floating || pe.Max != 40 {
		t.Fatalf("pattern 41: %v, want a PatternCapacityError of 40", err)
	}
	if err := put("ns", "exact"); err != nil {
		t.Fatalf("an exact override beside 40 patterns: %v", err)
	}
	if err := put("other", "user_x*"); err != nil {
		t.Fatalf("a pattern in another namespace: %v", err)
	}
	if err := put("ns", "user_3_*"); err != nil {
		t.Fatalf("replacing a pattern at the cap: %v", err)
	}
	if o, ok := s.Lookup("ws", "ns", "user_3_abc"); !ok || o.Identifier != "user_3_*" {
		t.Fatalf("lookup: %+v, %v", o, ok)
	}
	if o, ok := s.Lookup("ws", "ns", "xbot7y"); !ok || o.Identifier != "*bot7*" {
		t.Fatalf("lookup of a floating pattern: %+v, %v", o, ok)
	}
}

package rlsconfig

import "testing"

// TestDigesterKeepsStringsApart: sequences that write the same bytes split
// differently, or a name and contents that hold a NUL, digest apart; the
// same sequence digests alike.
func TestDigesterKeepsStringsApart(t *testing.T) {
	of := func(parts ...string) [32]byte {
		d := newDigester()
		for _, p := range parts {
			d.add([]byte(p))
		}
		return d.sum()
	}
	if of("ab", "c") == of("a", "bc") || of("a\x00", "b") == of("a", "\x00b") || of("a", "") == of("a") {
		t.Fatal("two sequences of the same bytes share a digest")
	}
	name, data := "rules.yaml", "domain: d"
	if first, again := of(name, data), of(name, data); first != again {
		t.Fatal("one sequence digests two ways")
	}
	// Files: the name of one and the contents of the next stay apart.
	a := []File{{Name: "a", Data: []byte("x\x00b")}, {Name: "c", Data: nil}}
	b := []File{{Name: "a", Data: []byte("x")}, {Name: "b\x00c", Data: nil}}
	if fingerprint(a) == fingerprint(b) {
		t.Fatal("two file sets share a fingerprint")
	}
}

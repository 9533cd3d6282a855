// Package golden keeps generated parts of the repository's documentation
// true to their source: a test renders the part and [Region] compares it
// with what the file holds, or, with UPDATE_DOCS=1 in the environment
// (make docs), writes it there.
package golden

import (
	"os"
	"strings"
	"testing"
)

// Region checks that the file at path holds want between the lines
// "<!-- BEGIN name (generated: make docs) -->" and "<!-- END name -->",
// failing t with the command that rewrites it if not; with UPDATE_DOCS=1
// it rewrites that region instead.
func Region(t *testing.T, path, name, want string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := "<!-- BEGIN "+name+" (generated: make docs) -->\n", "<!-- END "+name+" -->"
	before, rest, ok := strings.Cut(string(raw), begin)
	if !ok {
		t.Fatalf("%s has no line %q", path, strings.TrimSpace(begin))
	}
	got, after, ok := strings.Cut(rest, end)
	if !ok {
		t.Fatalf("%s has no line %q after %q", path, end, strings.TrimSpace(begin))
	}
	if got == want {
		return
	}
	if os.Getenv("UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(before+begin+want+end+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: rewrote %s", path, name)
		return
	}
	t.Errorf("%s: %s is not what its source generates (make docs rewrites it); the first difference is at line %d of it:\n%s",
		path, name, firstDifference(got, want), want)
}

// firstDifference returns the line, from 1, where a and b first differ.
func firstDifference(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

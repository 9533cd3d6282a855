package transport

import "testing"

// TestCompact: what protojson may space (it does so at random, by build)
// comes out without whitespace between tokens, strings untouched.
func TestCompact(t *testing.T) {
	for in, want := range map[string]string{
		`{"success": true, "limit":  "5"}`:         `{"success":true,"limit":"5"}`,
		"{\n  \"a\": [1, 2],\n  \"b\": \"x y\"\n}": `{"a":[1,2],"b":"x y"}`,
		`{"done":true}`: `{"done":true}`,
		`not json`:      `not json`,
	} {
		if got := string(compact([]byte(in))); got != want {
			t.Errorf("compact(%q) = %q, want %q", in, got, want)
		}
	}
}

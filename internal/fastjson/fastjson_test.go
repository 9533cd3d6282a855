package fastjson_test

import (
	"encoding/json"
	"testing"

	"github.com/unkeyed/ratelimit/internal/fastjson"
)

// TestPlain: printable ASCII but the characters a codec escapes.
func TestPlain(t *testing.T) {
	for s, want := range map[string]bool{
		"": true, "user_42": true, "a b/c:d.e=f,g|h": true, "~!@#$%^*()[]{}'`": true,
		`a"b`: false, `a\b`: false, "a<b": false, "a>b": false, "a&b": false,
		"é": false, "a\nb": false, "a\x7fb": false, "a\x00": false,
	} {
		if got := fastjson.Plain(s); got != want {
			t.Errorf("Plain(%q) = %v, want %v", s, got, want)
		}
		b, ok := fastjson.AppendPlain([]byte("x"), s)
		if ok != want || !ok && string(b) != "x" {
			t.Errorf("AppendPlain(%q) = %q, %v", s, b, ok)
		}
		if ok {
			// What every encoder writes for it.
			enc, _ := json.Marshal(s)
			if string(b[1:]) != string(enc) {
				t.Errorf("AppendPlain(%q) wrote %s, encoding/json %s", s, b[1:], enc)
			}
		}
	}
}

// TestScanner reads the shapes the fast paths take, and gives up on the
// rest.
func TestScanner(t *testing.T) {
	p := fastjson.NewScanner([]byte(` { "a" : "x y", "n": "-12", "m": 7, "u": 4294967295, "l": [ {"k":"v"} , {} ] } `))
	got := map[string]any{}
	ok := p.Object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "a":
			got["a"], ok = p.String()
		case "n", "m":
			got[string(key)], ok = p.Int64()
		case "u":
			got["u"], ok = p.Uint32()
		case "l":
			n := 0
			ok = p.Array(func() bool {
				n++
				return p.Object(func(key []byte) bool {
					v, ok := p.String()
					got[string(key)] = v
					return ok
				})
			})
			got["l"] = n
		}
		return ok
	})
	if !ok || !p.End() || got["a"] != "x y" || got["n"] != int64(-12) || got["m"] != int64(7) ||
		got["u"] != uint32(4294967295) || got["l"] != 2 || got["k"] != "v" {
		t.Fatalf("read %v, %v", got, ok)
	}
	for _, tc := range []struct {
		body             string
		str, i64, uint32 bool
	}{
		{`"a\"b"`, false, false, false}, {`"é"`, false, false, false}, {`"a<b"`, false, false, false},
		{`"unterminated`, false, false, false}, {`" 1"`, true, false, false}, {`"1"`, true, true, false},
		{`01`, false, false, false}, {`1.5`, false, false, false}, {`1e3`, false, false, false},
		{`-`, false, false, false}, {`-1`, false, true, false}, {`4294967296`, false, true, false},
		{`9223372036854775808`, false, false, false}, {`null`, false, false, false},
	} {
		p := fastjson.NewScanner([]byte(tc.body))
		_, str := p.String()
		p = fastjson.NewScanner([]byte(tc.body))
		_, i64 := p.Int64()
		p = fastjson.NewScanner([]byte(tc.body))
		_, u32 := p.Uint32()
		if str != tc.str || i64 != tc.i64 || u32 != tc.uint32 {
			t.Errorf("%s: read as a plain string %v, int64 %v, uint32 %v; want %v, %v, %v", tc.body, str, i64, u32, tc.str, tc.i64, tc.uint32)
		}
	}
}

// FuzzScannerAgreesWithEncodingJSON: whatever the scanner reads as a
// string or an integer, encoding/json reads the same.
func FuzzScannerAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\u0041"`, `12`, `"12"`, `-0`, ` "x" `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		p := fastjson.NewScanner([]byte(body))
		if s, ok := p.String(); ok && p.End() {
			var want string
			if err := json.Unmarshal([]byte(body), &want); err != nil || want != s {
				t.Fatalf("%q: scanned %q, encoding/json %q, %v", body, s, want, err)
			}
		}
		p = fastjson.NewScanner([]byte(body))
		if n, ok := p.Int64(); ok && p.End() {
			var want int64
			if err := json.Unmarshal([]byte(body), &want); err != nil {
				// Quoted: encoding/json reads it with the string option.
				var q struct {
					N int64 `json:"n,string"`
				}
				if err := json.Unmarshal([]byte(`{"n":`+body+`}`), &q); err != nil || q.N != n {
					t.Fatalf("%q: scanned %d, encoding/json %d, %v", body, n, q.N, err)
				}
			} else if want != n {
				t.Fatalf("%q: scanned %d, encoding/json %d", body, n, want)
			}
		}
	})
}

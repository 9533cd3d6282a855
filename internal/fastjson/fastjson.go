// Package fastjson is what the adapters' JSON fast paths share: a scanner
// of the few shapes their common requests take, and the writing of the
// strings their answers carry, around one definition of a plain string.
// A fast path reads or writes only what it can without decoding or
// escaping anything, and hands the rest to the protocol's full codec, so
// that it changes no answer: it only makes the common body cheaper.
package fastjson

import "strconv"

// Plain reports whether s is a plain string: printable ASCII other than
// '"', '\\', '<', '>' and '&'. Every JSON codec the adapters answer with
// (protojson, encoding/json, encoding/json/v2) writes a plain string as it
// is, between quotes (encoding/json escapes <, > and &, the others
// nothing of it), and one reads without unescaping anything: the fast
// paths read and write plain strings, and nothing else.
func Plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainBytes[s[i]] {
			return false
		}
	}
	return true
}

// plainBytes holds, for each byte, whether it may stand in a plain
// string: one load a byte on the fast paths.
var plainBytes = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// AppendPlain appends s between quotes and reports true if s is plain;
// otherwise it returns b as it was and false, and the caller writes s
// with its codec.
func AppendPlain(b []byte, s string) ([]byte, bool) {
	if !Plain(s) {
		return b, false
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// Scanner reads JSON values of the shapes the fast paths take from a
// body, one after the other. Each method skips the white space before
// what it reads and reports false when the body holds something else
// there (the caller then gives the body to its full decoder); after a
// false, the scanner's position is unspecified.
type Scanner struct {
	b []byte
	i int
}

// NewScanner returns a scanner at the start of body.
func NewScanner(body []byte) Scanner { return Scanner{b: body} }

func (p *Scanner) space() {
	b, i := p.b, p.i
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	p.i = i
}

// Byte consumes c.
func (p *Scanner) Byte(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// End reports whether only white space is left.
func (p *Scanner) End() bool {
	p.space()
	return p.i == len(p.b)
}

// Raw reads a plain string (see [Plain]) and returns its bytes in the
// body, without a copy: for a key that is only compared.
func (p *Scanner) Raw() ([]byte, bool) {
	if !p.Byte('"') {
		return nil, false
	}
	b, start := p.b, p.i
	for i := start; i < len(b); i++ {
		c := b[i]
		if c == '"' {
			p.i = i + 1
			return b[start:i], true
		}
		if !plainBytes[c] {
			return nil, false
		}
	}
	return nil, false
}

// String reads a plain string.
func (p *Scanner) String() (string, bool) {
	s, ok := p.Raw()
	return string(s), ok
}

// Uint32 reads a number that is a whole uint32: digits only, no leading
// zero, fraction or exponent.
func (p *Scanner) Uint32() (uint32, bool) {
	p.space()
	digits, ok := p.integer(false)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(string(digits), 10, 32)
	return uint32(n), err == nil
}

// Int64 reads an integer that fits an int64, quoted ("10", as protojson
// writes 64-bit integers) or not; no leading zero, fraction or exponent.
func (p *Scanner) Int64() (int64, bool) {
	p.space()
	quoted := p.i < len(p.b) && p.b[p.i] == '"'
	if quoted {
		p.i++
	}
	digits, ok := p.integer(true)
	if !ok || quoted && !p.next('"') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(digits), 10, 64)
	return n, err == nil
}

// next consumes c where the scanner stands, without white space before.
func (p *Scanner) next(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// integer reads an integer's text (a minus first if signed) where the
// scanner stands.
func (p *Scanner) integer(signed bool) ([]byte, bool) {
	b, start := p.b, p.i
	i := start
	if signed && i < len(b) && b[i] == '-' {
		i++
	}
	first := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == first || i-first > 1 && b[first] == '0' {
		return nil, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return nil, false
	}
	p.i = i
	return b[start:i], true
}

// Object reads an object, calling field for each key (a plain string)
// with the scanner before its value; field reads the value, and reports
// false to give up.
func (p *Scanner) Object(field func(key []byte) bool) bool {
	if !p.Byte('{') {
		return false
	}
	if p.Byte('}') {
		return true
	}
	for {
		key, ok := p.Raw()
		if !ok || !p.Byte(':') || !field(key) {
			return false
		}
		if p.Byte('}') {
			return true
		}
		if !p.Byte(',') {
			return false
		}
	}
}

// Array reads an array, calling elem for each element; elem reads it,
// and reports false to give up.
func (p *Scanner) Array(elem func() bool) bool {
	if !p.Byte('[') {
		return false
	}
	if p.Byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.Byte(']') {
			return true
		}
		if !p.Byte(',') {
			return false
		}
	}
}

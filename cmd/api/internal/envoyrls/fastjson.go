package envoyrls

import (
	"strconv"
	"unicode/utf8"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// /json's request and answer in their common shape (a domain, descriptors
// of entries, a hits addend; statuses with their current limit, what
// remains and when it resets) are read and written without protojson's
// reflection, which was a fifth of the route's CPU (docs/BENCHMARKS.md,
// "Floors"). Anything else, escaped strings and errors included, goes to
// protojson as before, so the fast path changes no answer
// (FuzzFastRateLimitRequest, TestFastRateLimitResponse).

// fastRateLimitRequest reads body, a RateLimitRequest in JSON, into m if
// it is of the common shape: the fields domain, descriptors (each with
// entries alone, each entry key and value) and hitsAddend (or
// hits_addend, a number), each once; strings without escapes. It reports
// whether it did; on false m is untouched and protojson decides.
func fastRateLimitRequest(body []byte, m *rlsv3.RateLimitRequest) bool {
	p := jsonScanner{b: body}
	var req rlsv3.RateLimitRequest
	var seenDomain, seenDescriptors, seenHits bool
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "domain":
			if seenDomain {
				return false
			}
			seenDomain = true
			var ok bool
			req.Domain, ok = p.str()
			return ok
		case "descriptors":
			if seenDescriptors {
				return false
			}
			seenDescriptors = true
			return p.array(func() bool {
				d, ok := p.descriptor()
				req.Descriptors = append(req.Descriptors, d)
				return ok
			})
		case "hitsAddend", "hits_addend":
			if seenHits {
				return false
			}
			seenHits = true
			n, ok := p.uint32()
			req.HitsAddend = n
			return ok
		}
		return false
	})
	if !ok || !p.end() {
		return false
	}
	m.Domain, m.Descriptors, m.HitsAddend = req.Domain, req.Descriptors, req.HitsAddend
	return true
}

// jsonScanner reads the few JSON shapes fastRateLimitRequest takes.
type jsonScanner struct {
	b []byte
	i int
}

func (p *jsonScanner) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// byte consumes c, after white space.
func (p *jsonScanner) byte(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (p *jsonScanner) end() bool {
	p.space()
	return p.i == len(p.b)
}

// str reads a string without escapes or control characters, valid UTF-8.
func (p *jsonScanner) str() (string, bool) {
	s, ok := p.raw()
	if !ok {
		return "", false
	}
	return string(s), true
}

// raw is str without the copy: the string's bytes in the body, for a key
// that is only compared.
func (p *jsonScanner) raw() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// uint32 reads a number that is a whole uint32, digits only.
func (p *jsonScanner) uint32() (uint32, bool) {
	p.space()
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == start || p.i-start > 1 && p.b[start] == '0' {
		return 0, false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.b[start:p.i]), 10, 32)
	return uint32(n), err == nil
}

// object reads an object, calling field for each key with the scanner
// before its value; field reads the value.
func (p *jsonScanner) object(field func(key []byte) bool) bool {
	if !p.byte('{') {
		return false
	}
	if p.byte('}') {
		return true
	}
	for {
		key, ok := p.raw()
		if !ok || !p.byte(':') || !field(key) {
			return false
		}
		if p.byte('}') {
			return true
		}
		if !p.byte(',') {
			return false
		}
	}
}

// array reads an array, calling elem for each element.
func (p *jsonScanner) array(elem func() bool) bool {
	if !p.byte('[') {
		return false
	}
	if p.byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.byte(']') {
			return true
		}
		if !p.byte(',') {
			return false
		}
	}
}

// descriptor reads a descriptor of entries alone.
func (p *jsonScanner) descriptor() (*rlcommonv3.RateLimitDescriptor, bool) {
	d := &rlcommonv3.RateLimitDescriptor{}
	seen := false
	ok := p.object(func(key []byte) bool {
		if string(key) != "entries" || seen {
			return false
		}
		seen = true
		return p.array(func() bool {
			e := &rlcommonv3.RateLimitDescriptor_Entry{}
			var seenKey, seenValue bool
			ok := p.object(func(key []byte) bool {
				var ok bool
				switch {
				case string(key) == "key" && !seenKey:
					seenKey = true
					e.Key, ok = p.str()
				case string(key) == "value" && !seenValue:
					seenValue = true
					e.Value, ok = p.str()
				}
				return ok
			})
			d.Entries = append(d.Entries, e)
			return ok
		})
	})
	return d, ok
}

// appendRateLimitResponse appends m in protobuf's JSON mapping, as
// protojson writes it (fields at their zero value left out), if it is of
// the common shape: an overall code and statuses, each with its code, its
// current limit (name, requests per unit, unit), what remains and when it
// resets; no headers, body, metadata or quota. It reports whether it did.
func appendRateLimitResponse(b []byte, m *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(m.ResponseHeadersToAdd) > 0 || len(m.RequestHeadersToAdd) > 0 || len(m.RawBody) > 0 ||
		m.DynamicMetadata != nil || m.Quota != nil {
		return b, false
	}
	b = append(b, '{')
	fields := 0
	if m.OverallCode != 0 {
		b = appendField(b, &fields, "overallCode")
		if b = appendEnum(b, m.OverallCode.String()); b == nil {
			return nil, false
		}
	}
	if len(m.Statuses) > 0 {
		b = appendField(b, &fields, "statuses")
		b = append(b, '[')
		for i, s := range m.Statuses {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendStatus(b, s); !ok {
				return nil, false
			}
		}
		b = append(b, ']')
	}
	return append(b, '}'), true
}

// appendStatus appends one descriptor's status; see
// appendRateLimitResponse.
func appendStatus(b []byte, s *rlsv3.RateLimitResponse_DescriptorStatus) ([]byte, bool) {
	if s == nil || s.Quota != nil {
		return nil, false
	}
	b = append(b, '{')
	fields := 0
	if s.Code != 0 {
		b = appendField(b, &fields, "code")
		if b = appendEnum(b, s.Code.String()); b == nil {
			return nil, false
		}
	}
	if l := s.CurrentLimit; l != nil {
		if l.UnitMultiplier != nil || !plainString(l.Name) {
			return nil, false
		}
		b = appendField(b, &fields, "currentLimit")
		b = append(b, '{')
		inner := 0
		if l.Name != "" {
			b = appendField(b, &inner, "name")
			b = append(b, '"')
			b = append(b, l.Name...)
			b = append(b, '"')
		}
		if l.RequestsPerUnit != 0 {
			b = appendField(b, &inner, "requestsPerUnit")
			b = strconv.AppendUint(b, uint64(l.RequestsPerUnit), 10)
		}
		if l.Unit != 0 {
			b = appendField(b, &inner, "unit")
			if b = appendEnum(b, l.Unit.String()); b == nil {
				return nil, false
			}
		}
		b = append(b, '}')
	}
	if s.LimitRemaining != 0 {
		b = appendField(b, &fields, "limitRemaining")
		b = strconv.AppendUint(b, uint64(s.LimitRemaining), 10)
	}
	if d := s.DurationUntilReset; d != nil {
		secs, nanos := d.GetSeconds(), d.GetNanos()
		if secs < 0 || nanos < 0 || nanos > 999_999_999 || secs > 315_576_000_000 {
			return nil, false
		}
		b = appendField(b, &fields, "durationUntilReset")
		b = append(b, '"')
		b = strconv.AppendInt(b, secs, 10)
		if nanos != 0 {
			// Three, six or nine digits, as protojson writes them.
			var digits [9]byte
			for i, n := 8, nanos; i >= 0; i, n = i-1, n/10 {
				digits[i] = byte('0' + n%10)
			}
			frac := digits[:]
			for len(frac) > 3 && string(frac[len(frac)-3:]) == "000" {
				frac = frac[:len(frac)-3]
			}
			b = append(b, '.')
			b = append(b, frac...)
		}
		b = append(b, `s"`...)
	}
	return append(b, '}'), true
}

// appendField appends the name of an object's field and its colon, after
// a comma unless it is the first; fields counts the object's fields.
func appendField(b []byte, fields *int, name string) []byte {
	if *fields > 0 {
		b = append(b, ',')
	}
	*fields++
	b = append(b, '"')
	b = append(b, name...)
	return append(b, `":`...)
}

// appendEnum appends an enum's name, or returns nil for a number without
// one (which protojson writes as a number).
func appendEnum(b []byte, name string) []byte {
	if name == "" || name[0] < 'A' || name[0] > 'Z' {
		return nil
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"')
}

// plainString reports whether s needs no escaping in JSON: printable
// ASCII other than '"' and '\'.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

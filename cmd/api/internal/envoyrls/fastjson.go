package envoyrls

import (
	"strconv"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/unkeyed/ratelimit/internal/fastjson"
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
// hits_addend, a number), each once; strings plain (fastjson.Plain). It reports
// whether it did; on false m is untouched and protojson decides.
func fastRateLimitRequest(body []byte, m *rlsv3.RateLimitRequest) bool {
	p := fastjson.NewScanner(body)
	var req rlsv3.RateLimitRequest
	var seenDomain, seenDescriptors, seenHits bool
	ok := p.Object(func(key []byte) bool {
		switch string(key) {
		case "domain":
			if seenDomain {
				return false
			}
			seenDomain = true
			var ok bool
			req.Domain, ok = p.String()
			return ok
		case "descriptors":
			if seenDescriptors {
				return false
			}
			seenDescriptors = true
			return p.Array(func() bool {
				d, ok := scanDescriptor(&p)
				req.Descriptors = append(req.Descriptors, d)
				return ok
			})
		case "hitsAddend", "hits_addend":
			if seenHits {
				return false
			}
			seenHits = true
			n, ok := p.Uint32()
			req.HitsAddend = n
			return ok
		}
		return false
	})
	if !ok || !p.End() {
		return false
	}
	m.Domain, m.Descriptors, m.HitsAddend = req.Domain, req.Descriptors, req.HitsAddend
	return true
}

// scanDescriptor reads a descriptor of entries alone.
func scanDescriptor(p *fastjson.Scanner) (*rlcommonv3.RateLimitDescriptor, bool) {
	d := &rlcommonv3.RateLimitDescriptor{}
	seen := false
	ok := p.Object(func(key []byte) bool {
		if string(key) != "entries" || seen {
			return false
		}
		seen = true
		return p.Array(func() bool {
			e := &rlcommonv3.RateLimitDescriptor_Entry{}
			var seenKey, seenValue bool
			ok := p.Object(func(key []byte) bool {
				var ok bool
				switch {
				case string(key) == "key" && !seenKey:
					seenKey = true
					e.Key, ok = p.String()
				case string(key) == "value" && !seenValue:
					seenValue = true
					e.Value, ok = p.String()
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
// resets; and response headers of plain keys and values (a refusal's
// Retry-After); no request headers, body, metadata or quota. It reports
// whether it did.
func appendRateLimitResponse(b []byte, m *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(m.RequestHeadersToAdd) > 0 || len(m.RawBody) > 0 || m.DynamicMetadata != nil || m.Quota != nil {
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
	if len(m.ResponseHeadersToAdd) > 0 {
		b = appendField(b, &fields, "responseHeadersToAdd")
		b = append(b, '[')
		for i, h := range m.ResponseHeadersToAdd {
			if h == nil || len(h.RawValue) > 0 {
				return nil, false
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			headerFields := 0
			for _, f := range [2][2]string{{"key", h.Key}, {"value", h.Value}} {
				if f[1] == "" {
					continue
				}
				b = appendField(b, &headerFields, f[0])
				var ok bool
				if b, ok = fastjson.AppendPlain(b, f[1]); !ok {
					return nil, false
				}
			}
			b = append(b, '}')
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
		if l.UnitMultiplier != nil {
			return nil, false
		}
		b = appendField(b, &fields, "currentLimit")
		b = append(b, '{')
		inner := 0
		if l.Name != "" {
			b = appendField(b, &inner, "name")
			var ok bool
			if b, ok = fastjson.AppendPlain(b, l.Name); !ok {
				return nil, false
			}
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

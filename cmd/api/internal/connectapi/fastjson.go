package connectapi

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
)

// The Limit call's JSON request and answer, nearly every call's on Connect
// JSON, are read and written without protojson's reflection: that saves
// about a sixth of the server's CPU per call (docs/BENCHMARKS.md, "The JSON
// fast path"). What the fast parser does not take is decoded by protojson
// as before, so the fast path changes no answer (FuzzFastLimitRequest,
// TestLimitResponseJSON).

// limitFields are LimitRequest's fields in JSON, in order.
var limitFields = []string{"namespace", "identifier", "limit", "duration", "cost"}

// plainLimit is a limit request as the fast parser reads it.
type plainLimit struct {
	namespace, identifier string
	limit, duration       int64
	cost                  *int64
}

// fastLimitRequest reads a LimitRequest in JSON with parsePlainLimit; on
// false, protojson decides.
func fastLimitRequest(body []byte, m *ratelimitv1.LimitRequest) bool {
	p, ok := parsePlainLimit(body)
	if ok {
		m.Namespace, m.Identifier, m.Limit, m.Duration, m.Cost = p.namespace, p.identifier, p.limit, p.duration, p.cost
	}
	return ok
}

// appendLimitResponse appends m as the JSON codec writes it: every field,
// 64-bit integers as strings, as protojson with EmitUnpopulated does,
// without its reflection.
func appendLimitResponse(b []byte, m *ratelimitv1.LimitResponse) []byte {
	b = append(b, `{"success":`...)
	b = strconv.AppendBool(b, m.Success)
	b = append(b, `,"limit":"`...)
	b = strconv.AppendInt(b, m.Limit, 10)
	b = append(b, `","remaining":"`...)
	b = strconv.AppendInt(b, m.Remaining, 10)
	b = append(b, `","reset":"`...)
	b = strconv.AppendInt(b, m.Reset_, 10)
	b = append(b, `","retryAfter":"`...)
	b = strconv.AppendInt(b, m.RetryAfter, 10)
	b = append(b, `","overrideId":`...)
	b = appendJSONString(b, m.OverrideId)
	b = append(b, `,"reservation":`...)
	b = appendJSONString(b, m.Reservation)
	b = append(b, `,"algorithm":"`...)
	b = append(b, m.Algorithm.String()...)
	return append(b, `"}`...)
}

// parsePlainLimit parses a limit request the way nearly every caller sends
// it, without reflection or allocations beyond the strings: one flat
// object whose keys are limitFields, each once, whose strings hold no
// escapes and whose numbers are plain integers, quoted ("10", as protojson
// writes 64-bit integers) or not. It reports false for
// anything else (escapes, null, floats, exponents, unknown or repeated
// keys, a required one missing, malformed JSON): its callers then decode
// with the full decoder,
// which accepts or refuses it with the message that names the field. So a
// fast path only makes the common body cheaper; fuzz tests check that it
// agrees with the full decoder on everything it accepts.
func parsePlainLimit(body []byte) (plainLimit, bool) {
	var out plainLimit
	if !utf8.Valid(body) {
		return out, false
	}
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return out, false
	}
	i = skipSpace(body, i+1)
	var seen [5]bool
	first := true
	for {
		if i < len(body) && body[i] == '}' && first {
			i++
			break
		}
		key, j, ok := plainString(body, i)
		if !ok {
			return out, false
		}
		i = skipSpace(body, j)
		if i >= len(body) || body[i] != ':' {
			return out, false
		}
		i = skipSpace(body, i+1)
		field := -1
		for f, name := range limitFields {
			if string(key) == name {
				field = f
				break
			}
		}
		if field < 0 || seen[field] {
			return out, false
		}
		seen[field] = true
		if field <= 1 { // namespace, identifier
			v, j, ok := plainString(body, i)
			if !ok {
				return out, false
			}
			if field == 0 {
				out.namespace = string(v)
			} else {
				out.identifier = string(v)
			}
			i = j
		} else { // limit, duration, cost
			quoted := i < len(body) && body[i] == '"'
			if quoted {
				i++
			}
			n, j, ok := plainInt(body, i)
			if !ok {
				return out, false
			}
			if quoted {
				if j >= len(body) || body[j] != '"' {
					return out, false
				}
				j++
			}
			switch field {
			case 2:
				out.limit = n
			case 3:
				out.duration = n
			case 4:
				out.cost = &n
			}
			i = j
		}
		first = false
		i = skipSpace(body, i)
		if i < len(body) && body[i] == ',' {
			i = skipSpace(body, i+1)
			continue
		}
		if i < len(body) && body[i] == '}' {
			i++
			break
		}
		return out, false
	}
	// A required field left out is the full decoder's to name as missing.
	return out, skipSpace(body, i) == len(body) && seen[0] && seen[1] && seen[2] && seen[3]
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a JSON string at b[i] without escapes or control
// characters, and returns its contents and the index after it.
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, i, false
		}
	}
	return nil, i, false
}

// plainInt reads a JSON integer at b[i] (no fraction or exponent) that fits
// an int64, and returns it and the index after it.
func plainInt(b []byte, i int) (int64, int, bool) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	start := j
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == start || (b[start] == '0' && j-start > 1) {
		return 0, i, false
	}
	if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, i, false
	}
	n, err := strconv.ParseInt(string(b[i:j]), 10, 64)
	if err != nil {
		return 0, i, false
	}
	return n, j, true
}

// appendJSONString appends s as a JSON string. The ids it is used for are
// ASCII letters, digits, _ and -; anything else is encoded by
// encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			quoted, _ := json.Marshal(s)
			return append(b, quoted...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

package connectapi

import (
	"encoding/json"
	"strconv"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/internal/fastjson"
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
	b = append(b, `","shadowDenied":`...)
	b = strconv.AppendBool(b, m.ShadowDenied)
	b = append(b, `,"penalized":`...)
	b = strconv.AppendBool(b, m.Penalized)
	b = append(b, `,"wait":"`...)
	b = strconv.AppendInt(b, m.Wait, 10)
	return append(b, `"}`...)
}

// parsePlainLimit parses a limit request the way nearly every caller sends
// it, without reflection or allocations beyond the strings: one flat
// object whose keys are limitFields, each once, whose strings are plain
// (fastjson.Plain) and whose numbers are plain integers, quoted ("10", as
// protojson writes 64-bit integers) or not. It reports false for
// anything else (escapes, null, floats, exponents, unknown or repeated
// keys, a required one missing, malformed JSON): its callers then decode
// with the full decoder, which accepts or refuses it with the message that
// names the field. So a fast path only makes the common body cheaper; fuzz
// tests check that it agrees with the full decoder on everything it
// accepts.
func parsePlainLimit(body []byte) (plainLimit, bool) {
	var out plainLimit
	var seen [5]bool
	p := fastjson.NewScanner(body)
	ok := p.Object(func(key []byte) bool {
		field := -1
		for f, name := range limitFields {
			if string(key) == name {
				field = f
				break
			}
		}
		if field < 0 || seen[field] {
			return false
		}
		seen[field] = true
		var ok bool
		switch field {
		case 0:
			out.namespace, ok = p.String()
		case 1:
			out.identifier, ok = p.String()
		case 2:
			out.limit, ok = p.Int64()
		case 3:
			out.duration, ok = p.Int64()
		case 4:
			var n int64
			n, ok = p.Int64()
			out.cost = &n
		}
		return ok
	})
	// A required field left out is the full decoder's to name as missing.
	return out, ok && p.End() && seen[0] && seen[1] && seen[2] && seen[3]
}

// appendJSONString appends s as a JSON string: as it is when it is plain
// (fastjson.Plain: ids, tokens), by encoding/json otherwise.
func appendJSONString(b []byte, s string) []byte {
	if b, ok := fastjson.AppendPlain(b, s); ok {
		return b
	}
	quoted, _ := json.Marshal(s)
	return append(b, quoted...)
}

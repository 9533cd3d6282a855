package unkeyv2

import (
	"strconv"

	json "github.com/go-json-experiment/json"

	"github.com/unkeyed/ratelimit/internal/fastjson"
)

// The limit route's answer, nearly every call's, is written by hand, byte
// for byte as writeJSON (encoding/json/v2's Marshal) would write it
// (TestLimitAnswerAsWriteJSON), without its reflection: a tenth of the
// route's CPU (docs/BENCHMARKS.md, "Floors").

// appendJSON appends d as writeJSON writes it.
func (d *limitData) appendJSON(b []byte) []byte {
	b = append(b, `{"limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"reset":`...)
	b = strconv.AppendInt(b, d.Reset, 10)
	b = append(b, `,"success":`...)
	b = strconv.AppendBool(b, d.Success)
	if d.OverrideID != "" {
		b = append(b, `,"overrideId":`...)
		b = appendString(b, d.OverrideID)
	}
	if d.Reservation != "" {
		b = append(b, `,"reservation":`...)
		b = appendString(b, d.Reservation)
	}
	return append(b, '}')
}

// appendSuccess appends the answer of data with requestID as writeJSON
// writes a success of it, newline included.
func appendSuccess(b []byte, data *limitData, requestID string) []byte {
	b = append(b, `{"data":`...)
	b = data.appendJSON(b)
	b = append(b, `,"meta":{"requestId":`...)
	b = appendString(b, requestID)
	return append(b, "}}\n"...)
}

// appendString appends s as writeJSON writes a string: as it is when it
// is plain (fastjson.Plain: ids, tokens), by encoding/json/v2 otherwise.
func appendString(b []byte, s string) []byte {
	if b, ok := fastjson.AppendPlain(b, s); ok {
		return b
	}
	quoted, _ := json.Marshal(s)
	return append(b, quoted...)
}

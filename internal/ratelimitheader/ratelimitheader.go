// Package ratelimitheader writes the HTTP fields the IETF's httpapi
// working group is standardising for rate limits
// (draft-ietf-httpapi-ratelimit-headers): RateLimit-Policy, the quota of
// each policy and its window, and RateLimit, what is left of it and when
// it resets. Both are Structured Field lists of items: a policy's name (a
// string) with integer parameters, q and w on the policy, r and t on the
// limit, in seconds.
package ratelimitheader

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The fields' names.
const (
	PolicyField = "RateLimit-Policy"
	LimitField  = "RateLimit"
)

// Policy returns the RateLimit-Policy item of policy name: its quota in a
// window (whole seconds, at least 1), `"name";q=100;w=60`.
func Policy(name string, quota int64, window time.Duration) string {
	return item(name, "q", max(quota, 0), "w", max(CeilSeconds(window), 1))
}

// Limit returns the RateLimit item of policy name: what remains of its
// quota and the seconds until its window resets (rounded up),
// `"name";r=42;t=17`.
func Limit(name string, remaining int64, reset time.Duration) string {
	return item(name, "r", max(remaining, 0), "t", max(CeilSeconds(reset), 0))
}

// maxInteger is the largest Structured Field integer: 15 digits. A quota
// or a remainder past it (this service's limits go to 2^53) is written as
// it, so that a strict parser does not refuse the whole field.
const maxInteger = 999_999_999_999_999

// item writes name as a Structured Field string with two integer
// parameters, each at most maxInteger.
func item(name, k1 string, v1 int64, k2 string, v2 int64) string {
	v1, v2 = min(v1, maxInteger), min(v2, maxInteger)
	var b strings.Builder
	writeName(&b, name)
	for _, p := range [2]struct {
		k string
		v int64
	}{{k1, v1}, {k2, v2}} {
		b.WriteByte(';')
		b.WriteString(p.k)
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(p.v, 10))
	}
	return b.String()
}

// Set sets both fields of policy name on h: its quota in a window, what
// remains of it and the time until it resets. Both share one allocation of
// their values: they are set on every limit's answer.
func Set(h http.Header, name string, quota int64, window time.Duration, remaining int64, reset time.Duration) {
	values := [2]string{Policy(name, quota, window), Limit(name, remaining, reset)}
	h[canonicalPolicy], h[canonicalLimit] = values[0:1:1], values[1:2:2]
}

// The fields' names as http.Header keys them.
var (
	canonicalPolicy = http.CanonicalHeaderKey(PolicyField)
	canonicalLimit  = http.CanonicalHeaderKey(LimitField)
)

// CeilSeconds is d in whole seconds, rounded up: how every field of
// seconds is written (a wait cut short would send a client back early).
func CeilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// writeName writes name as a Structured Field string: quoted, '"' and '\'
// escaped, and every byte a string may not hold (outside printable ASCII)
// written as %XX, as '%' itself is, so that a name from a rule or a
// namespace of any characters is a valid field the client can read back.
func writeName(b *strings.Builder, name string) {
	const hex = "0123456789ABCDEF"
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e || c == '%':
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

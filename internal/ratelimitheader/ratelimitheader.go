// Package ratelimitheader writes the HTTP fields the IETF's httpapi
// working group is standardising for rate limits
// (draft-ietf-httpapi-ratelimit-headers): RateLimit-Policy, the quota of
// each policy and its window, and RateLimit, what is left of it and when
// it resets. Both are Structured Field lists of items: a policy's name (a
// string) with integer parameters, q and w on the policy, r and t on the
// limit, in seconds.
package ratelimitheader

import (
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
	var b strings.Builder
	writeName(&b, name)
	b.WriteString(";q=")
	b.WriteString(strconv.FormatInt(max(quota, 0), 10))
	b.WriteString(";w=")
	b.WriteString(strconv.FormatInt(max(ceilSeconds(window), 1), 10))
	return b.String()
}

// Limit returns the RateLimit item of policy name: what remains of its
// quota and the seconds until its window resets (rounded up),
// `"name";r=42;t=17`.
func Limit(name string, remaining int64, reset time.Duration) string {
	var b strings.Builder
	writeName(&b, name)
	b.WriteString(";r=")
	b.WriteString(strconv.FormatInt(max(remaining, 0), 10))
	b.WriteString(";t=")
	b.WriteString(strconv.FormatInt(max(ceilSeconds(reset), 0), 10))
	return b.String()
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

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

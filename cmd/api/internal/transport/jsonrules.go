package transport

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// InvalidUTF8 is the rule that s, a JSON string (or any text) that is not
// valid UTF-8, breaks, naming its first byte that is not.
func InvalidUTF8(s []byte) string {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Sprintf("must be valid UTF-8; byte 0x%02x is not", s[i])
		}
		i += n
	}
	return "must be valid UTF-8"
}

// checkInteger returns the rule s breaks as the JSON integer of a field of
// kind, or "": an integer, written plainly or as a number of no fraction
// (1e3), that the field holds.
func checkInteger(s string, kind protoreflect.Kind) string {
	bits, signed := 64, true
	switch kind {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		bits = 32
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		bits, signed = 32, false
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		signed = false
	}
	var err error
	if signed {
		_, err = strconv.ParseInt(s, 10, bits)
	} else {
		_, err = strconv.ParseUint(s, 10, bits)
	}
	switch {
	case err == nil:
		return ""
	case errors.Is(err, strconv.ErrRange):
		return OutOfRange(bits, signed, s)
	}
	// Not a plain integer of the field's size: a number with a fraction or
	// an exponent, or a negative one for an unsigned field, or not a number.
	f, err := strconv.ParseFloat(s, 64) // 1e400: ±Inf and ErrRange
	if err != nil && !errors.Is(err, strconv.ErrRange) || err == nil && (math.IsInf(f, 0) || f != math.Trunc(f)) {
		return fmt.Sprintf("must be an integer, got %.40q", s)
	}
	// Every bound is a power of two, which float64 holds exactly.
	lo, end := 0.0, math.Ldexp(1, bits)
	if signed {
		lo, end = -math.Ldexp(1, bits-1), math.Ldexp(1, bits-1)
	}
	if f < lo || f >= end {
		return OutOfRange(bits, signed, s)
	}
	return ""
}

// OutOfRange is the rule that got, a JSON integer, breaks where a field of
// bits bits, signed or not, cannot hold it: the range of the field's type,
// and the value.
func OutOfRange(bits int, signed bool, got string) string {
	max := uint64(math.MaxUint64) >> (64 - bits)
	lo, hi, kind := "0", strconv.FormatUint(max, 10), fmt.Sprintf("an unsigned %d-bit integer", bits)
	if signed {
		lo, hi = strconv.FormatInt(-int64(max>>1)-1, 10), strconv.FormatUint(max>>1, 10)
		kind = fmt.Sprintf("a %d-bit integer", bits)
	}
	return fmt.Sprintf("out of range: must be from %s to %s (%s), got %.40s", lo, hi, kind, got)
}

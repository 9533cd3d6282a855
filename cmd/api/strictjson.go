package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The Unkey routes decode JSON strictly, as Unkey's OpenAPI spec describes
// every body (additionalProperties: false) and as the Connect API's decoder
// does: encoding/json alone matches keys case-insensitively with the last
// one winning ({"identifier":"a","IDENTIFIER":"b"} is "b"), ignores unknown
// keys, and turns invalid UTF-8 and lone UTF-16 surrogates (\ud800) into
// U+FFFD, which would then share a counter with the literal character. So a
// body is walked first: it must be valid UTF-8, every object holds only its
// fields, each once and spelled exactly, and no string escapes a lone
// surrogate. Errors name the field, never a Go type.

// strictDecode decodes body into v, an object whose fields are keys or, if
// v points to a slice, an array of such objects.
func strictDecode(body []byte, v any, keys []string) error {
	if !utf8.Valid(body) {
		return badRequest("request body: must be valid UTF-8", unkeyFieldError{Location: "body", Message: "must be valid UTF-8"})
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	isArray := reflect.TypeOf(v).Elem().Kind() == reflect.Slice
	var elems []json.RawMessage
	if isArray {
		if err := expectDelim(dec, '[', "body", "an array of objects"); err != nil {
			return err
		}
		for i := 0; dec.More(); i++ {
			start := dec.InputOffset()
			if err := checkObject(dec, body, fmt.Sprintf("body[%d]", i), keys); err != nil {
				return err
			}
			elems = append(elems, bytes.TrimLeft(body[start:dec.InputOffset()], " \t\r\n,"))
		}
		if _, err := dec.Token(); err != nil {
			return syntaxError(err)
		}
	} else if err := checkObject(dec, body, "body", keys); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, errEOF) {
		return badRequest("request body: must hold one JSON value", unkeyFieldError{Location: "body", Message: "must hold one JSON value"})
	}
	if !isArray {
		return typeError("body", json.Unmarshal(body, v))
	}
	slice := reflect.ValueOf(v).Elem()
	slice.Set(reflect.MakeSlice(slice.Type(), len(elems), len(elems)))
	for i, raw := range elems {
		if err := typeError(fmt.Sprintf("body[%d]", i), json.Unmarshal(raw, slice.Index(i).Addr().Interface())); err != nil {
			return err
		}
	}
	return nil
}

// errEOF is what a decoder's Token returns after the last value.
var errEOF = func() error { _, err := json.NewDecoder(strings.NewReader("")).Token(); return err }()

// checkObject reads one object from dec, whose input is body, at location
// at: only keys, each once and spelled exactly, and no lone surrogate in a
// key or a value.
func checkObject(dec *json.Decoder, body []byte, at string, keys []string) error {
	if err := expectDelim(dec, '{', at, "an object"); err != nil {
		return err
	}
	seen := make([]bool, len(keys))
	for dec.More() {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return syntaxError(err)
		}
		key, _ := tok.(string)
		if loneSurrogate(body[start:dec.InputOffset()]) {
			return fieldError(at, "a key escapes a lone UTF-16 surrogate (\\ud800 to \\udfff without its pair)")
		}
		field := at + "." + key
		i := slices.Index(keys, key)
		if i < 0 {
			rule := "is not a field of this request"
			if j := slices.IndexFunc(keys, func(k string) bool { return strings.EqualFold(k, key) }); j >= 0 {
				rule += fmt.Sprintf(" (field names are case-sensitive: %s)", keys[j])
			}
			return fieldError(field, rule)
		}
		if seen[i] {
			return fieldError(field, "must appear once")
		}
		seen[i] = true
		start = dec.InputOffset()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return syntaxError(err)
		}
		if loneSurrogate(body[start:dec.InputOffset()]) {
			return fieldError(field, "must not escape a lone UTF-16 surrogate (\\ud800 to \\udfff without its pair)")
		}
	}
	_, err := dec.Token() // the closing brace
	return syntaxError(err)
}

// expectDelim reads the opening delimiter want, or answers that the value
// at at must be what.
func expectDelim(dec *json.Decoder, want json.Delim, at, what string) error {
	tok, err := dec.Token()
	if err != nil {
		return syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fieldError(at, "must be "+what)
	}
	return nil
}

// loneSurrogate reports whether raw JSON text escapes a UTF-16 surrogate
// that is not half of a pair: a high one not followed by a low one, or a
// low one on its own.
func loneSurrogate(raw []byte) bool {
	for i := 0; i+1 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' || i+6 > len(raw) {
			i++ // an escaped character: skip it, so that \\u is not read as \u
			continue
		}
		r, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		if err != nil {
			return false // the decoder refuses it
		}
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return true
		case r >= 0xd800 && r <= 0xdbff:
			if i+12 > len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
				return true
			}
			lo, err := strconv.ParseUint(string(raw[i+8:i+12]), 16, 16)
			if err != nil || lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 11
			continue
		}
		i += 5
	}
	return false
}

// syntaxError answers malformed JSON, saying where.
func syntaxError(err error) error {
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return badRequest(fmt.Sprintf("request body: must be valid JSON (%s at byte %d)", se.Error(), se.Offset),
			unkeyFieldError{Location: "body", Message: "must be valid JSON"})
	}
	return badRequest("request body: must be valid JSON", unkeyFieldError{Location: "body", Message: "must be valid JSON"})
}

// typeError answers a value of the wrong type at its field, in JSON's
// terms rather than Go's.
func typeError(at string, err error) error {
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := "a string"
		switch te.Type.Kind() {
		case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Pointer:
			want = "an integer"
		case reflect.Bool:
			want = "a boolean"
		}
		return fieldError(at+"."+te.Field, "must be "+want)
	}
	return syntaxError(err)
}

// fieldError answers a 400 naming one field.
func fieldError(location, rule string) error {
	return badRequest(location+": "+rule, unkeyFieldError{Location: location, Message: rule})
}

package unkeyv2

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/internal/invalid"
)

// strict decodes as Unkey's OpenAPI spec describes every body
// (additionalProperties: false), with Go's json v2: a member that is not a
// field of the request is refused, and so, by json v2's defaults, are a
// name given twice, a name in another case than the field's (encoding/json
// would match {"IDENTIFIER": …} to identifier, the last one winning),
// invalid UTF-8 and an escaped lone UTF-16 surrogate (\ud800), which
// encoding/json turns into U+FFFD, so that they would share a counter
// with the literal character.
var strict = json.RejectUnknownMembers(true)

// decode decodes body into v, a pointer to a request struct or to a slice
// of them, strictly. Its errors are validation errors naming the field as
// a location in the body (body.limit, body[1].cost) and the rule in JSON's
// terms, never Go's.
func decode(body []byte, v any) error {
	want := reflect.TypeOf(v).Elem()
	if i := firstByte(body); i >= 0 && body[i] == 'n' {
		return &invalid.Error{Field: "body", Rule: "must be " + kindOf(want)}
	}
	if err := json.Unmarshal(body, v, strict); err != nil {
		return decodeError(want, body, err)
	}
	return nil
}

// firstByte returns the index of the first byte of body that is not JSON
// white space, or -1.
func firstByte(body []byte) int {
	for i, c := range body {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return i
		}
	}
	return -1
}

// decodeError words an error of json v2 decoding body into t.
func decodeError(t reflect.Type, body []byte, err error) error {
	var sem *json.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case errors.As(err, &sem) && errors.Is(err, strconv.ErrRange) && integer(sem.GoType) != nil:
		it := integer(sem.GoType)
		signed := it.Kind() >= reflect.Int && it.Kind() <= reflect.Int64
		return &invalid.Error{Field: at(t, sem.JSONPointer),
			Rule: transport.OutOfRange(it.Bits(), signed, string(sem.JSONValue))}
	case errors.As(err, &syn) && strings.Contains(syn.Err.Error(), "invalid UTF-8"):
		// json v2 refuses it by default; the offset is that of the
		// string's first byte that is not UTF-8, or before it.
		rule := "must be valid UTF-8"
		if off := syn.ByteOffset; off >= 0 && off < int64(len(body)) {
			rule = transport.InvalidUTF8(body[off:])
		}
		return &invalid.Error{Field: at(t, syn.JSONPointer), Rule: rule}
	case errors.As(err, &sem) && errors.Is(err, json.ErrUnknownName):
		name := sem.JSONPointer.LastToken()
		rule := "is not a field of this request"
		if f := fieldFolding(t, name); f != "" {
			rule += " (field names are case-sensitive: " + f + ")"
		}
		return &invalid.Error{Field: at(t, sem.JSONPointer), Rule: rule}
	case errors.As(err, &sem):
		return &invalid.Error{Field: at(t, sem.JSONPointer), Rule: "must be " + kindOf(sem.GoType)}
	case errors.As(err, &syn) && errors.Is(err, jsontext.ErrDuplicateName):
		return &invalid.Error{Field: at(t, syn.JSONPointer), Rule: "must appear once"}
	case errors.As(err, &syn) && strings.Contains(syn.Err.Error(), "surrogate"):
		return &invalid.Error{Field: at(t, syn.JSONPointer),
			Rule: "must not escape a lone UTF-16 surrogate (\\ud800 to \\udfff without its pair)"}
	case errors.As(err, &syn):
		return &invalid.Error{Field: "body",
			Rule: fmt.Sprintf("must be valid JSON (%v at byte %d)", syn.Err, syn.ByteOffset)}
	}
	return &invalid.Error{Field: "body", Rule: "must be valid JSON"}
}

// at returns the location that a JSON pointer names in a body of type t:
// "" is body, /limit is body.limit, and in an array body /1/cost is
// body[1].cost.
func at(t reflect.Type, p jsontext.Pointer) string {
	var b strings.Builder
	b.WriteString("body")
	index := t.Kind() == reflect.Slice
	for tok := range p.Tokens() {
		if index {
			b.WriteString("[" + tok + "]")
			index = false
			continue
		}
		b.WriteString("." + tok)
	}
	return b.String()
}

// integer returns the integer type that t is or points to, or nil.
func integer(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() < reflect.Int || t.Kind() > reflect.Uint64 {
		return nil
	}
	return t
}

// kindOf names what JSON value a Go type is decoded from.
func kindOf(t reflect.Type) string {
	if t == nil {
		return "a value of another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
		return "an integer"
	case reflect.Bool:
		return "a boolean"
	case reflect.Struct:
		return "an object"
	case reflect.Slice:
		return "an array of objects"
	}
	return "a string"
}

// fieldFolding returns the field of the request type t (or of its
// elements) whose name matches name but for case, or "".
func fieldFolding(t reflect.Type, name string) string {
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if strings.EqualFold(tag, name) {
			return tag
		}
	}
	return ""
}

package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/failure"
	"github.com/unkeyed/ratelimit/internal/invalid"
)

// Requests in JSON that the decoder refuses, or that may lack a required
// field, are read again against their message, so that a caller reads
// what is wrong in the API's words: the
// field by its path ("limits[1].cost"), "missing" for a required field left
// out, an unknown field refused (a typo must not silently count 1), never
// the decoder's own text. Binary protobuf stays lenient, as protobuf is.

// requiredFields are the fields, by JSON name, a request of each message
// must give: what has no meaningful zero.
var requiredFields = map[protoreflect.FullName][]string{
	"ratelimit.v1.LimitRequest":          {"namespace", "identifier", "limit", "duration"},
	"ratelimit.v1.MultiLimitRequest":     {"limits"},
	"ratelimit.v1.BatchLimitRequest":     {"limits"},
	"ratelimit.v1.SettleRequest":         {"reservation", "cost"},
	"ratelimit.v1.SetOverrideRequest":    {"namespace", "identifier", "limit", "duration"},
	"ratelimit.v1.GetOverrideRequest":    {"namespace", "identifier"},
	"ratelimit.v1.DeleteOverrideRequest": {"namespace", "identifier"},
	"ratelimit.v1.ListOverridesRequest":  {"namespace"},
	"ratelimit.v1.GetRatelimitsRequest":  {"namespace", "from", "to"},
	"ratelimit.v1.ListNamespacesRequest": {"from", "to"},
}

// maybeMissing reports whether a required field of m (see
// requiredFields), or of a message in one of m's lists, is not set: left
// out of the JSON, or given as its zero value.
func maybeMissing(m protoreflect.Message) bool {
	md := m.Descriptor()
	for _, name := range requiredFields[md.FullName()] {
		if !m.Has(md.Fields().ByJSONName(name)) {
			return true
		}
	}
	missing := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.IsList() && fd.Kind() == protoreflect.MessageKind {
			list := v.List()
			for i := range list.Len() {
				if maybeMissing(list.Get(i).Message()) {
					missing = true
					return false
				}
			}
		}
		return true
	})
	return missing
}

// CheckJSON returns a *invalid.Error naming the first field of
// data that md does not take: not JSON, not an object, an unknown field, a
// value of the wrong type, a string that is not valid UTF-8, an integer out
// of its field's range, or a required field missing; or nil.
func CheckJSON(data []byte, md protoreflect.MessageDescriptor) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if len(bytes.TrimSpace(data)) == 0 {
		return &invalid.Error{Field: "body", Rule: "missing: the request, a JSON object"}
	}
	if err := checkMessage(dec, md, ""); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return &invalid.Error{Field: "body", Rule: "must be one JSON object, with nothing after it"}
	}
	return nil
}

func fieldPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

func where(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

// checkMessage reads one JSON object for md at path.
func checkMessage(dec *json.Decoder, md protoreflect.MessageDescriptor, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return &invalid.Error{Field: where(path), Rule: "must be a JSON object, and valid JSON"}
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &invalid.Error{Field: where(path), Rule: "must be a JSON object"}
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return &invalid.Error{Field: where(path), Rule: "must be valid JSON"}
		}
		name, _ := tok.(string)
		fd := md.Fields().ByJSONName(name)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(name))
		}
		if fd == nil {
			return &invalid.Error{Field: fieldPath(path, name), Rule: "unknown field: " + string(md.Name()) + " has " + fieldNames(md)}
		}
		seen[fd.JSONName()] = true
		if err := checkValue(dec, fd, fieldPath(path, fd.JSONName())); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return &invalid.Error{Field: where(path), Rule: "must be valid JSON"}
	}
	for _, name := range requiredFields[md.FullName()] {
		if !seen[name] {
			return &invalid.Error{Field: fieldPath(path, name), Rule: "missing: " + string(md.Name()) + " needs it"}
		}
	}
	return nil
}

// fieldNames lists md's fields by JSON name.
func fieldNames(md protoreflect.MessageDescriptor) string {
	var b bytes.Buffer
	for i := range md.Fields().Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(md.Fields().Get(i).JSONName())
	}
	return b.String()
}

// checkValue reads the value of fd at path.
func checkValue(dec *json.Decoder, fd protoreflect.FieldDescriptor, path string) error {
	if fd.IsList() {
		tok, err := dec.Token()
		if err != nil {
			return &invalid.Error{Field: path, Rule: "must be valid JSON"}
		}
		if tok == nil {
			return nil
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return &invalid.Error{Field: path, Rule: "must be a JSON array"}
		}
		for i := 0; dec.More(); i++ {
			if err := checkSingle(dec, fd, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		dec.Token() // ']'
		return nil
	}
	if fd.IsMap() {
		var m map[string]json.RawMessage
		if err := dec.Decode(&m); err != nil {
			return &invalid.Error{Field: path, Rule: "must be a JSON object"}
		}
		return nil
	}
	return checkSingle(dec, fd, path)
}

// checkSingle reads one value of fd's kind at path.
func checkSingle(dec *json.Decoder, fd protoreflect.FieldDescriptor, path string) error {
	switch {
	case fd.Kind() == protoreflect.MessageKind && fd.Message().FullName().Parent() == "google.protobuf":
		// A well-known type: a wrapper (UInt64Value, as Envoy's
		// descriptors' hits_addend) is its value, in JSON as in Go;
		// the others have JSON forms of their own, which the decoder
		// judges.
		if value := fd.Message().Fields().ByName("value"); value != nil && strings.HasSuffix(string(fd.Message().Name()), "Value") &&
			fd.Message().Fields().Len() == 1 {
			return checkSingle(dec, value, path)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return &invalid.Error{Field: path, Rule: "must be valid JSON"}
		}
		return nil
	case fd.Kind() == protoreflect.MessageKind:
		return checkMessage(dec, fd.Message(), path)
	case fd.Kind() == protoreflect.StringKind:
		// Read raw: encoding/json turns invalid UTF-8 into U+FFFD, and
		// protojson refuses it.
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return &invalid.Error{Field: path, Rule: "must be valid JSON"}
		}
		switch {
		case string(raw) == "null":
		case raw[0] != '"':
			return &invalid.Error{Field: path, Rule: "must be a string"}
		case !utf8.Valid(raw):
			return &invalid.Error{Field: path, Rule: InvalidUTF8(raw)}
		}
		return nil
	}
	tok, err := dec.Token()
	if err != nil {
		return &invalid.Error{Field: path, Rule: "must be valid JSON"}
	}
	if tok == nil {
		return nil // null: the field's default, as protobuf's JSON mapping has it
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		if _, ok := tok.(bool); !ok {
			return &invalid.Error{Field: path, Rule: "must be true or false"}
		}
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind,
		protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		var s string
		switch v := tok.(type) {
		case json.Number:
			s = v.String()
		case string:
			s = v // 64-bit integers may be quoted, as protobuf's JSON mapping writes them
		default:
			return &invalid.Error{Field: path, Rule: "must be an integer"}
		}
		if rule := checkInteger(s, fd.Kind()); rule != "" {
			return &invalid.Error{Field: path, Rule: rule}
		}
	default:
		// Floats, enums and bytes: no request of the API has them; the
		// decoder judges.
	}
	return nil
}

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

// decodeErrors holds the failure of each request message whose JSON was
// refused, from its decoding to its handler's interceptor: connect-go
// wraps a codec's error in its own words, an interceptor's it does not.
var decodeErrors sync.Map // proto message pointer -> error

// refused records that msg was refused with err; the codec then leaves msg
// empty and reports success.
func refused(msg any, err error) { decodeErrors.Store(msg, err) }

// decodeFailures is the interceptor that answers a refused request with its
// failure, classified as any failure of a request (failure.Classify).
type decodeFailures struct{ l *Layer }

func (d decodeFailures) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err, ok := decodeErrors.LoadAndDelete(req.Any()); ok {
			return nil, d.l.ConnectError(ctx, req.Spec().Procedure, err.(error))
		}
		return next(ctx, req)
	}
}

func (d decodeFailures) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (d decodeFailures) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// connectContentTypes are the content types connect-go serves a Connect,
// gRPC or gRPC-Web call in, as a 415 names them.
const connectContentTypes = "application/json (Connect JSON), application/proto, application/grpc[+proto|+json], application/grpc-web[+proto|+json]"

// RequireContentType answers a POST whose content type next cannot serve
// (connect-go answers 415 with an empty body, which curl shows as nothing)
// with 415 and a JSON body naming the types it takes.
func RequireContentType(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && !connectContentType(r.Header.Get("Content-Type")) {
			w.Header().Set("Accept-Post", "application/json, application/proto, application/grpc, application/grpc+proto, application/grpc+json, application/grpc-web, application/grpc-web+proto, application/grpc-web+json")
			WriteJSONError(w, http.StatusUnsupportedMediaType, failure.KindInvalidArgument,
				fmt.Sprintf("content-type: must be %s; got %q (curl: -H 'content-type: application/json')", connectContentTypes, r.Header.Get("Content-Type")))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func connectContentType(ct string) bool {
	ct = strings.ToLower(strings.TrimSpace(ct))
	if base, _, ok := strings.Cut(ct, ";"); ok {
		ct = strings.TrimSpace(base)
	}
	switch ct {
	case "application/json", "application/proto", "application/grpc", "application/grpc+proto", "application/grpc+json",
		"application/grpc-web", "application/grpc-web+proto", "application/grpc-web+json", "application/connect+json",
		"application/connect+proto":
		return true
	}
	return false
}

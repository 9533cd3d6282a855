package transport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/internal/spelling"
)

// Requests in JSON that the decoder refuses, or that may lack a required
// field, are read again against their message, so that a caller reads
// what is wrong in the API's words: the
// field by its path ("limits[1].cost"), "missing" for a required field left
// out, an unknown field refused (a typo must not silently count 1), never
// the decoder's own text. Binary protobuf stays lenient, as protobuf is.

// Required names the fields, by JSON name, a request of a message must
// give (what has no meaningful zero): an adapter's codec hook (see
// Codecs.Required). A name may list alternatives, "limit|shadow": any one
// of them given will do. Nil requires nothing.
type Required func(protoreflect.FullName) []string

// alternatives splits a required name into the fields any one of which
// will do.
func alternatives(name string) []string { return strings.Split(name, "|") }

// fields returns what r requires of the message named name.
func (r Required) fields(name protoreflect.FullName) []string {
	if r == nil {
		return nil
	}
	return r(name)
}

// maybeMissing reports whether a field required of m, or of a message in
// one of m's lists, is not set: left out of the JSON, or given as its zero
// value.
func (r Required) maybeMissing(m protoreflect.Message) bool {
	md := m.Descriptor()
	for _, name := range r.fields(md.FullName()) {
		if !slices.ContainsFunc(alternatives(name), func(n string) bool { return m.Has(md.Fields().ByJSONName(n)) }) {
			return true
		}
	}
	missing := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.IsList() && fd.Kind() == protoreflect.MessageKind {
			list := v.List()
			for i := range list.Len() {
				if r.maybeMissing(list.Get(i).Message()) {
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
// of its field's range, or a field required missing; or nil.
func CheckJSON(data []byte, md protoreflect.MessageDescriptor, required Required) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	c := checker{dec: dec, required: required}
	if len(bytes.TrimSpace(data)) == 0 {
		return &invalid.Error{Field: "body", Rule: "missing: the request, a JSON object"}
	}
	if err := c.checkMessage(md, ""); err != nil {
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

// notJSON is the error of a request that stops being JSON at path: rule,
// and where the reader stopped (a byte offset, from 0): the start of the
// value it could not read, which for a body cut short is the value it
// breaks off in.
func (c checker) notJSON(path, rule string) error {
	return &invalid.Error{Field: path, Rule: fmt.Sprintf("%s: it breaks off or stops being JSON at byte %d", rule, c.dec.InputOffset())}
}

// checker reads a JSON request against its message, field by field.
type checker struct {
	dec      *json.Decoder
	required Required
}

// checkMessage reads one JSON object for md at path.
func (c checker) checkMessage(md protoreflect.MessageDescriptor, path string) error {
	dec := c.dec
	tok, err := dec.Token()
	if err != nil {
		return c.notJSON(where(path), "must be a JSON object, and valid JSON")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &invalid.Error{Field: where(path), Rule: "must be a JSON object"}
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return c.notJSON(where(path), "must be valid JSON")
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
		if err := c.checkValue(fd, fieldPath(path, fd.JSONName())); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return c.notJSON(where(path), "must be valid JSON")
	}
	for _, name := range c.required.fields(md.FullName()) {
		alt := alternatives(name)
		if !slices.ContainsFunc(alt, func(n string) bool { return seen[n] }) {
			rule := "missing: " + string(md.Name()) + " needs it"
			if len(alt) > 1 {
				rule += " (unless " + strings.Join(alt[1:], " or ") + " is given)"
			}
			return &invalid.Error{Field: fieldPath(path, alt[0]), Rule: rule}
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
func (c checker) checkValue(fd protoreflect.FieldDescriptor, path string) error {
	dec := c.dec
	if fd.IsList() {
		tok, err := dec.Token()
		if err != nil {
			return c.notJSON(path, "must be valid JSON")
		}
		if tok == nil {
			return nil
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return &invalid.Error{Field: path, Rule: "must be a JSON array"}
		}
		for i := 0; dec.More(); i++ {
			if err := c.checkSingle(fd, path+"["+strconv.Itoa(i)+"]"); err != nil {
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
	return c.checkSingle(fd, path)
}

// checkSingle reads one value of fd's kind at path.
func (c checker) checkSingle(fd protoreflect.FieldDescriptor, path string) error {
	dec := c.dec
	switch {
	case fd.Kind() == protoreflect.MessageKind && fd.Message().FullName().Parent() == "google.protobuf":
		// A well-known type: a wrapper (UInt64Value, as Envoy's
		// descriptors' hits_addend) is its value, in JSON as in Go;
		// the others have JSON forms of their own, which the decoder
		// judges.
		if value := fd.Message().Fields().ByName("value"); value != nil && strings.HasSuffix(string(fd.Message().Name()), "Value") &&
			fd.Message().Fields().Len() == 1 {
			return c.checkSingle(value, path)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return c.notJSON(path, "must be valid JSON")
		}
		return nil
	case fd.Kind() == protoreflect.MessageKind:
		return c.checkMessage(fd.Message(), path)
	case fd.Kind() == protoreflect.StringKind:
		// Read raw: encoding/json turns invalid UTF-8 into U+FFFD, and
		// protojson refuses it.
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return c.notJSON(path, "must be valid JSON")
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
		return c.notJSON(path, "must be valid JSON")
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
	case protoreflect.EnumKind:
		if name, ok := tok.(string); ok {
			return checkEnum(fd.Enum(), name, path)
		}
		if _, ok := tok.(json.Number); !ok {
			return &invalid.Error{Field: path, Rule: "must be one of " + strings.Join(enumNames(fd.Enum()), ", ") + " (or its number)"}
		}
	default:
		// Floats and bytes: no request of the API has them; the decoder
		// judges.
	}
	return nil
}

// checkEnum refuses name, a value of the enum ed at path that is none of
// its values' names, naming them and the one name most likely meant.
// Protobuf's JSON mapping takes an enum value by its name, as the .proto
// spells it, or by its number: "CALENDAR_UNIT_MONTH" or 3, not "month"
// (which protojson refuses, and so this API).
func checkEnum(ed protoreflect.EnumDescriptor, name, path string) error {
	if ed.Values().ByName(protoreflect.Name(name)) != nil {
		return nil
	}
	names := enumNames(ed)
	meant, near := spelling.Near(name, names)
	if !near {
		meant = "" // nothing near: no guess
	}
	// A name in lower case ("calendar_unit_month"), or a short form
	// ("month", "token_bucket") that ends one name only: that name.
	upper := strings.ToUpper(name)
	var ends []string
	for _, n := range names {
		if n == upper {
			ends = []string{n}
			break
		}
		if upper != "" && strings.HasSuffix(n, "_"+upper) {
			ends = append(ends, n)
		}
	}
	if len(ends) == 1 {
		meant = ends[0]
	}
	rule := fmt.Sprintf("must be one of %s (or its number), got %q", strings.Join(names, ", "), name)
	if meant != "" {
		rule += fmt.Sprintf(": did you mean %q? (an enum value is its full name)", meant)
	}
	return &invalid.Error{Field: path, Rule: rule}
}

// enumNames returns the names of ed's values.
func enumNames(ed protoreflect.EnumDescriptor) []string {
	names := make([]string, ed.Values().Len())
	for i := range names {
		names[i] = string(ed.Values().Get(i).Name())
	}
	return names
}

// Package invalid is the error of a request field that breaks a rule: the
// one invalid-argument error that every layer builds (the limiter's checks,
// the overrides, keys, audit and analytics, each protocol's decoding) and
// every protocol answers alike (invalid_argument, HTTP 400), naming the
// field and the rule. It imports nothing of the project, so any package may
// use it without taking on another's vocabulary.
package invalid

import (
	"errors"
	"fmt"
	"strings"
)

// Error reports a request field that breaks a rule. Whoever returns it has
// changed nothing.
type Error struct {
	// Field is the name of the offending field, such as "identifier" or
	// "limits[2].cost".
	Field string
	// Rule says what the field must be.
	Rule string
}

// Error returns "field: rule".
func (e *Error) Error() string { return e.Field + ": " + e.Rule }

// As returns the *Error in err's chain, if there is one.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// InEntry names entry i of the list field in err, an invalid-argument
// error of that entry: "cost" becomes "limits[2].cost". Any other error is
// returned as it is.
func InEntry(field string, i int, err error) error {
	e, ok := As(err)
	if !ok {
		return err
	}
	return &Error{Field: fmt.Sprintf("%s[%d].%s", field, i, e.Field), Rule: e.Rule}
}

// InJSON returns field, a path of names as the .proto and the limiter
// spell them ("calendar.time_zone", "limits[2].lease_id"), in the
// spelling of protobuf's JSON mapping and of Unkey's v2 routes,
// lowerCamelCase ("calendar.timeZone", "limits[2].leaseId"): what a route
// that speaks JSON names a field by, since that is what its caller wrote.
func InJSON(field string) string {
	if !strings.Contains(field, "_") {
		return field
	}
	b := make([]byte, 0, len(field))
	for i := 0; i < len(field); i++ {
		if c := field[i]; c == '_' && i+1 < len(field) && field[i+1] >= 'a' && field[i+1] <= 'z' && i > 0 && field[i-1] != '.' {
			b = append(b, field[i+1]-'a'+'A')
			i++
			continue
		}
		b = append(b, field[i])
	}
	return string(b)
}

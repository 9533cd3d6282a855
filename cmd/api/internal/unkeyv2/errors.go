package unkeyv2

import (
	"errors"
	"net/http"
	"strings"

	json "github.com/go-json-experiment/json"

	"github.com/unkeyed/ratelimit/cmd/api/internal/failure"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/services/access"
)

// apiError is a failure in Unkey's shape.
type apiError struct {
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Status int    `json:"status"`
	Type   string `json:"type"`
	// Errors names the offending fields of a 400, [] if none.
	Errors *[]fieldError `json:"errors,omitempty"`
}

type fieldError struct {
	Location string `json:"location"`
	Message  string `json:"message"`
}

// problems are Unkey's title, status and type (the last part of its URL)
// of each kind of failure.
var problems = [...]struct {
	title  string
	status int
	typ    string
}{
	failure.KindInternal:          {"Internal Server Error", http.StatusInternalServerError, "application/unexpected_error"},
	failure.KindInvalidArgument:   {"Bad Request", http.StatusBadRequest, "application/invalid_input"},
	failure.KindUnauthenticated:   {"Unauthorized", http.StatusUnauthorized, "authentication/missing"},
	failure.KindNotFound:          {"Not Found", http.StatusNotFound, "data/ratelimit_override_not_found"},
	failure.KindResourceExhausted: {"Too Many Requests", http.StatusTooManyRequests, "application/resource_exhausted"},
	// A caller gone or out of time does not read the answer; these are
	// what a proxy in between would see.
	failure.KindCanceled:         {"Client Closed Request", 499, "application/canceled"},
	failure.KindDeadlineExceeded: {"Gateway Timeout", http.StatusGatewayTimeout, "application/timeout"},
	failure.KindPermissionDenied: {"Forbidden", http.StatusForbidden, "authorization/insufficient_permissions"},
	failure.KindUnavailable:      {"Service Unavailable", http.StatusServiceUnavailable, "application/service_unavailable"},
	failure.KindConflict:         {"Conflict", http.StatusConflict, "data/ratelimit_reservation_settled"},
}

// fail answers err, the failure of the request r, in Unkey's shape under
// requestID (a new one if it is "").
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, requestID string, err error) {
	f := h.layer.Classify(r.Context(), r.URL.Path, requestID, err)
	if f.RequestID != "" {
		requestID = f.RequestID
	} else if requestID == "" {
		requestID = transport.NewRequestID()
	}
	p := problems[f.Kind]
	e := apiError{Title: p.title, Status: p.status, Type: "https://unkey.com/docs/errors/unkey/" + p.typ, Detail: f.JSONMessage()}
	switch f.Kind {
	case failure.KindInternal:
		e.Detail = "the request could not be completed; the server log has the detail under this requestId"
	case failure.KindUnauthenticated:
		if !errors.Is(f.Err, access.ErrMissingToken) {
			e.Type = "https://unkey.com/docs/errors/unkey/authentication/key_not_found"
		}
	case failure.KindNotFound:
		e.Detail = "This override does not exist."
	case failure.KindInvalidArgument:
		at := location(f.Field)
		e.Detail = at + ": " + f.Rule
		fields := []fieldError{{Location: at, Message: f.Rule}}
		e.Errors = &fields
	}
	writeJSON(w, p.status, struct {
		Meta  meta     `json:"meta"`
		Error apiError `json:"error"`
	}{meta{requestID}, e})
}

// location is where in the body a field of the pipeline's is: "cost" is
// body.cost, an entry of multiLimit's array "[2].cost" is body[2].cost, and
// the body itself (its size, its syntax) is body.
func location(field string) string {
	switch {
	case field == "body" || field == "request body":
		return "body"
	case strings.HasPrefix(field, "body"):
		return field
	case strings.HasPrefix(field, "["):
		return "body" + field
	}
	return "body." + field
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
}

package transport

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/unkeyed/ratelimit/cmd/api/internal/failure"
	"github.com/unkeyed/ratelimit/internal/invalid"
)

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

// CheckJSONContentType refuses a request to a JSON route (Unkey's v2,
// envoyproxy/ratelimit's /json) whose content type is not
// application/json, as the Connect routes refuse one: a web page may
// send text/plain or a form to any site without asking (a "simple"
// request), but JSON only after a CORS preflight, which this API never
// grants. Without it, a page could set overrides on an open server (make
// run) from a visitor's browser.
func CheckJSONContentType(r *http.Request) error {
	ct := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Type")))
	if base, _, ok := strings.Cut(ct, ";"); ok {
		ct = strings.TrimSpace(base)
	}
	if ct == "application/json" {
		return nil
	}
	return &invalid.Error{Field: "content-type", Rule: fmt.Sprintf("must be application/json, got %q (curl: -H 'content-type: application/json')",
		r.Header.Get("Content-Type"))}
}

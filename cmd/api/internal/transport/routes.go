package transport

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// A request that names no route, or a route with the wrong HTTP method, is
// answered here in the API's words: net/http and connect-go answer them
// with a plain-text "404 page not found" or an empty 405, which a person
// with curl cannot act on.

// KnownMethods returns next, the connect-go handler of the service sd at
// its path prefix (/<service>/), behind the two answers connect-go gives
// without a word of its own:
//
//   - A path that names no method of sd is answered 404 with a JSON body
//     in Connect's error shape, code unimplemented, naming sd's methods
//     (unknown method "Limt": ratelimit.v1.RatelimitService has Limit, …).
//     A gRPC or gRPC-Web call is answered the status unimplemented with
//     that message instead, as gRPC requires.
//   - An HTTP method the RPC does not take (POST; and GET for an RPC
//     marked free of side effects, which connect-go serves on GET too) is
//     answered 405 with the Allow header and a JSON body saying the
//     method it must be.
func KnownMethods(sd protoreflect.ServiceDescriptor, next http.Handler) http.Handler {
	prefix := "/" + string(sd.FullName()) + "/"
	methods := sd.Methods()
	allow := make(map[string][]string, methods.Len())
	names := make([]string, methods.Len())
	for i := range names {
		m := methods.Get(i)
		names[i] = string(m.Name())
		allow[names[i]] = []string{http.MethodPost}
		if opts, ok := m.Options().(*descriptorpb.MethodOptions); ok &&
			opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS {
			allow[names[i]] = []string{http.MethodGet, http.MethodPost}
		}
	}
	list := strings.Join(names, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, prefix)
		methods, ok := allow[name]
		if !ok {
			msg := fmt.Sprintf("unknown method %q: %s has %s", name, sd.FullName(), list)
			if name == "" {
				msg = fmt.Sprintf("missing method after %s: %s has %s", prefix, sd.FullName(), list)
			}
			for _, known := range names {
				if strings.EqualFold(known, name) {
					msg = fmt.Sprintf("unknown method %q (method names are case-sensitive: %s): %s has %s", name, known, sd.FullName(), list)
				}
			}
			writeUnimplemented(w, r, http.StatusNotFound, msg)
			return
		}
		for _, m := range methods {
			if r.Method == m {
				next.ServeHTTP(w, r)
				return
			}
		}
		writeMethodNotAllowed(w, r, methods)
	})
}

// NoRoute returns the handler of the requests that no other route of mux
// takes, to be registered on mux as "/". A path that mux serves on other
// HTTP methods is answered 405 with the Allow header and a JSON body
// saying which; any other path 404 with a JSON body in Connect's error
// shape, code not_found, saying what the port serves (served: the
// services by name, as a gRPC call of another service is told, and
// routes, the other paths in words). A gRPC or gRPC-Web call is answered
// the status unimplemented, unknown service, as a gRPC server answers
// one.
func NoRoute(mux *http.ServeMux, services []string, routes string) http.Handler {
	servicesList := strings.Join(services, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if grpcCall(r) {
			service, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
			writeUnimplemented(w, r, http.StatusNotFound,
				fmt.Sprintf("unknown service %q: this port serves %s", service, servicesList))
			return
		}
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			writeMethodNotAllowed(w, r, allow)
			return
		}
		writeJSONErrorCode(w, http.StatusNotFound, connect.CodeNotFound,
			fmt.Sprintf("no route for %s %.200q: this port serves the RPCs of %s (POST /SERVICE/METHOD), and %s",
				r.Method, r.URL.Path, servicesList, routes))
	})
}

// allowedMethods returns the HTTP methods other than r's under which mux
// routes r's path somewhere other than "/" (NoRoute itself).
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.WithContext(r.Context()) // a shallow copy, its method changed
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	return allow
}

// grpcCall reports whether r is a gRPC or gRPC-Web call, whose failure is a
// status in gRPC's framing rather than a JSON body.
func grpcCall(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

// unimplementedWriter writes the unimplemented status of a gRPC or
// gRPC-Web call.
var unimplementedWriter = connect.NewErrorWriter()

// writeUnimplemented answers r, for which nothing is implemented: a gRPC or
// gRPC-Web call with the status unimplemented and msg; any other request
// with status and a JSON body in Connect's error shape, code
// unimplemented.
func writeUnimplemented(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if grpcCall(r) {
		unimplementedWriter.Write(w, r, connect.NewError(connect.CodeUnimplemented, errors.New(msg)))
		return
	}
	writeJSONErrorCode(w, status, connect.CodeUnimplemented, msg)
}

// writeMethodNotAllowed answers r, whose HTTP method its route does not
// take, 405 with the Allow header and a JSON body naming the methods it
// takes.
func writeMethodNotAllowed(w http.ResponseWriter, r *http.Request, allow []string) {
	w.Header().Set("Allow", strings.Join(allow, ", "))
	must := strings.Join(allow, " or ")
	if len(allow) > 2 {
		must = strings.Join(allow[:len(allow)-1], ", ") + " or " + allow[len(allow)-1]
	}
	msg := fmt.Sprintf("method: must be %s, got %s", must, r.Method)
	if len(allow) == 1 && allow[0] == http.MethodPost {
		msg += " (the request is the body of a POST; curl: -d '{…}' -H 'content-type: application/json')"
	}
	writeJSONErrorCode(w, http.StatusMethodNotAllowed, connect.CodeUnimplemented, msg)
}

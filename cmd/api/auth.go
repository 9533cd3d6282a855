package main

import (
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
)

var (
	errMissingToken = connect.NewError(connect.CodeUnauthenticated,
		errors.New("missing bearer token: send an authorization: Bearer <token> header"))
	errUnknownToken = connect.NewError(connect.CodeUnauthenticated, errors.New("unknown bearer token"))
)

// connectAuthError words an authentication failure for Connect and gRPC.
func connectAuthError(err error) error {
	if errors.Is(err, pipeline.ErrMissingToken) {
		return errMissingToken
	}
	return errUnknownToken
}

// errorWriter writes an error in the protocol of the request it answers:
// Connect, gRPC or gRPC-Web.
var errorWriter = connect.NewErrorWriter()

// authenticate resolves the caller's workspace from its bearer token before
// any of the request body is read or decoded, so an unauthenticated caller
// costs a header lookup and a hash (see pipeline.Authenticate).
func authenticate(p *pipeline.Pipeline, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := p.Authenticate(r.Header.Get("Authorization"))
		if err != nil {
			if r.ProtoMajor == 1 {
				// Otherwise net/http reads what is left of the body
				// before answering, to keep the connection: a caller
				// that never sends it would hold the answer back.
				w.Header().Set("Connection", "close")
			}
			errorWriter.Write(w, r, connectAuthError(err))
			return
		}
		next.ServeHTTP(w, r.WithContext(pipeline.WithWorkspace(r.Context(), ws)))
	})
}

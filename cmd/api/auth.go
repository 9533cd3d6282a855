package main

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// openWorkspace is every caller's workspace when no tokens are configured.
const openWorkspace = "default"

type workspaceKey struct{}

// workspaceFrom returns the workspace authenticate resolved for ctx.
func workspaceFrom(ctx context.Context) string {
	ws, _ := ctx.Value(workspaceKey{}).(string)
	return ws
}

var (
	errMissingToken = connect.NewError(connect.CodeUnauthenticated,
		errors.New("missing bearer token: send an authorization: Bearer <token> header"))
	errUnknownToken = connect.NewError(connect.CodeUnauthenticated, errors.New("unknown bearer token"))
)

// errorWriter writes an error in the protocol of the request it answers:
// Connect, gRPC or gRPC-Web.
var errorWriter = connect.NewErrorWriter()

// authenticate resolves the caller's workspace from its bearer token before
// any of the request body is read or decoded, so an unauthenticated caller
// costs a header lookup and a hash. The workspace is never taken from the
// request body, so one workspace can never read or spend another's counters.
// With no tokens configured every caller is in the open workspace.
func authenticate(t tokens, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws := openWorkspace
		if len(t) > 0 {
			var err error
			token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			switch {
			case !ok || token == "":
				err = errMissingToken
			default:
				if ws, ok = t.workspace(token); !ok {
					err = errUnknownToken
				}
			}
			if err != nil {
				if r.ProtoMajor == 1 {
					// Otherwise net/http reads what is left of the body
					// before answering, to keep the connection: a caller
					// that never sends it would hold the answer back.
					w.Header().Set("Connection", "close")
				}
				errorWriter.Write(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), workspaceKey{}, ws)))
	})
}

package main

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
)

// openWorkspace is every caller's workspace when no tokens are configured.
const openWorkspace = "default"

type workspaceKey struct{}

// workspaceFrom returns the workspace the auth interceptor resolved for ctx.
func workspaceFrom(ctx context.Context) string {
	ws, _ := ctx.Value(workspaceKey{}).(string)
	return ws
}

var (
	errMissingToken = errors.New("missing bearer token: send an authorization: Bearer <token> header")
	errUnknownToken = errors.New("unknown bearer token")
)

// authInterceptor resolves the caller's workspace from its bearer token. The
// workspace is never taken from the request body, so one workspace can never
// read or spend another's counters. With no tokens configured every caller is
// in the open workspace.
func authInterceptor(t tokens) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			ws := openWorkspace
			if len(t) > 0 {
				auth := req.Header().Get("Authorization")
				token, ok := strings.CutPrefix(auth, "Bearer ")
				if !ok || token == "" {
					return nil, connect.NewError(connect.CodeUnauthenticated, errMissingToken)
				}
				if ws, ok = t.workspace(token); !ok {
					return nil, connect.NewError(connect.CodeUnauthenticated, errUnknownToken)
				}
			}
			return next(context.WithValue(ctx, workspaceKey{}, ws), req)
		}
	}
}

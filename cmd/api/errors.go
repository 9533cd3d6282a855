package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"connectrpc.com/connect"
)

// opaqueInternalErrors keeps what went wrong inside the server away from
// clients (see opaqueError).
func opaqueInternalErrors(logger *slog.Logger) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if err == nil {
				return resp, nil
			}
			return nil, opaqueError(ctx, logger, req.Spec().Procedure, err)
		}
	}
}

// opaqueError returns err as a Connect error for a client. An internal or
// unknown error (a database that refused a connection, say, whose message
// names hosts and ports) becomes a generic message with a request id, also
// in the Request-Id header, and the log carries the error under the same
// id. Errors about the request itself (invalid_argument, not_found,
// resource_exhausted, …) and a caller's own cancellation pass as they are.
func opaqueError(ctx context.Context, logger *slog.Logger, procedure string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return ce
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return connect.NewError(connect.CodeDeadlineExceeded, err)
		}
		return connect.NewError(connect.CodeCanceled, err)
	}
	if code := connect.CodeOf(err); code != connect.CodeInternal && code != connect.CodeUnknown {
		return err
	}
	id := newRequestID()
	logger.ErrorContext(ctx, "request failed", "request_id", id, "procedure", procedure, "error", err)
	opaque := connect.NewError(connect.CodeInternal, errors.New(opaqueMessage(id)))
	opaque.Meta().Set("Request-Id", id)
	return opaque
}

// opaqueMessage is what a client reads of an internal error.
func opaqueMessage(requestID string) string {
	return "internal error: the request could not be completed; the server log has the detail under request id " + requestID
}

// recoverPanic answers a handler's panic as an opaque internal error and
// logs it with its stack, instead of letting net/http drop the connection.
func recoverPanic(logger *slog.Logger) func(context.Context, connect.Spec, http.Header, any) error {
	return func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
		id := newRequestID()
		logger.ErrorContext(ctx, "handler panicked", "request_id", id, "procedure", spec.Procedure, "panic", p, "stack", string(debug.Stack()))
		err := connect.NewError(connect.CodeInternal, fmt.Errorf("%s", opaqueMessage(id)))
		err.Meta().Set("Request-Id", id)
		return err
	}
}

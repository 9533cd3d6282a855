package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/failure"
)

// Failure is an error sorted for a caller: failure.Classify's answer,
// and for an internal error the request id it was logged under.
type Failure struct {
	failure.Failure
	// RequestID is set for KindInternal: the log has the error under it,
	// and the caller is told only [InternalMessage] of it.
	RequestID string
}

// loggedError is an internal error that was logged already, under id.
type loggedError struct {
	id  string
	err error
}

func (e *loggedError) Error() string { return e.err.Error() }
func (e *loggedError) Unwrap() error { return e.err }

// Classify sorts err, the failure of a request to where (a procedure or a
// path), for its caller. An internal error (a database that refused a
// connection, say, whose message names hosts and ports) is logged with its
// detail under requestID, or under a new id if requestID is "", unless it
// was logged already (a panic); every other kind is about the request
// itself and is not logged, so that what a client sends cannot fill the
// log.
func (l *Layer) Classify(ctx context.Context, where, requestID string, err error) Failure {
	call.SetOutcome(ctx, call.OutcomeError)
	var logged *loggedError
	if errors.As(err, &logged) {
		return Failure{Failure: failure.Failure{Kind: failure.KindInternal, Err: logged.err}, RequestID: logged.id}
	}
	f := Failure{Failure: failure.Classify(err)}
	if f.Kind != failure.KindInternal {
		return f
	}
	if requestID == "" {
		requestID = NewRequestID()
	}
	f.RequestID = requestID
	l.logger.ErrorContext(ctx, "request failed", "request_id", requestID, "procedure", where, "error", err)
	return f
}

// panicked logs a handler's panic p with its stack under a new request id
// and returns the internal error it is answered as.
func (l *Layer) panicked(ctx context.Context, where string, p any) error {
	id := NewRequestID()
	l.logger.ErrorContext(ctx, "handler panicked", "request_id", id, "procedure", where, "panic", p, "stack", string(debug.Stack()))
	return &loggedError{id: id, err: fmt.Errorf("panic: %v", p)}
}

// InternalMessage is what a caller is told of an internal error.
func InternalMessage(requestID string) string {
	return "internal error: the request could not be completed; the server log has the detail under request id " + requestID
}

// grpcCodes are the gRPC codes of the failure kinds: Connect's codes
// are the same numbers, so the Connect adapter and Envoy's rate limit
// service on connect-go and grpc-go all answer by this table.
var grpcCodes = [...]connect.Code{
	failure.KindInternal:          connect.CodeInternal,
	failure.KindInvalidArgument:   connect.CodeInvalidArgument,
	failure.KindUnauthenticated:   connect.CodeUnauthenticated,
	failure.KindNotFound:          connect.CodeNotFound,
	failure.KindResourceExhausted: connect.CodeResourceExhausted,
	failure.KindCanceled:          connect.CodeCanceled,
	failure.KindDeadlineExceeded:  connect.CodeDeadlineExceeded,
	failure.KindPermissionDenied:  connect.CodePermissionDenied,
	failure.KindUnavailable:       connect.CodeUnavailable,
	failure.KindConflict:          connect.CodeAlreadyExists,
}

// ConnectError returns err, the failure of a call to procedure, as the
// Connect error its caller is told (see [Layer.Classify]), with the code of
// its kind by the gRPC table. An internal error carries only
// [InternalMessage], and its request id in the Request-Id header too.
func (l *Layer) ConnectError(ctx context.Context, procedure string, err error) *connect.Error {
	f := l.Classify(ctx, procedure, "", err)
	if f.Kind == failure.KindInternal {
		ce := connect.NewError(connect.CodeInternal, errors.New(InternalMessage(f.RequestID)))
		ce.Meta().Set("Request-Id", f.RequestID)
		return ce
	}
	return connect.NewError(grpcCodes[f.Kind], errors.New(f.JSONMessage()))
}

// ConnectRenderer renders failures as Connect, gRPC or gRPC-Web errors,
// in the protocol of the request, for routes served by connect-go.
func (l *Layer) ConnectRenderer() Renderer {
	ew := connect.NewErrorWriter()
	return func(w http.ResponseWriter, r *http.Request, err error) {
		ew.Write(w, r, l.ConnectError(r.Context(), r.URL.Path, err))
	}
}

// WriteJSONError answers a failure of kind with status and a JSON body in
// Connect's shape, {"code": "invalid_argument", "message": msg}: what every
// JSON route answers, so that a client never meets an empty or plain-text
// error.
func WriteJSONError(w http.ResponseWriter, status int, kind failure.Kind, msg string) {
	writeJSONErrorCode(w, status, grpcCodes[kind], msg)
}

// writeJSONErrorCode is [WriteJSONError] for an answer of a code that no
// kind of the pipeline's has, such as unimplemented for a path that names
// no method.
func writeJSONErrorCode(w http.ResponseWriter, status int, code connect.Code, msg string) {
	body, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code.String(), msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

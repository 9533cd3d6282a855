package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Unkey's v2 ratelimit API, on the same port as the Connect API, so that
// callers of Unkey's SDKs (@unkey/ratelimit, @unkey/api) switch by changing
// their base URL. Bodies and errors are shaped as Unkey's OpenAPI spec gives
// them: {meta: {requestId}, data: …} on success, {meta, error: {title,
// detail, status, type}} (with errors: [{location, message}] for 400) on
// failure. The bearer token maps to a workspace as for the Connect API.

// unkeyMaxIdentifier is the longest identifier Unkey accepts. The limiter
// keys counters by at most MaxNameLength characters, so a longer identifier
// is counted under its digest (see counterIdentifier).
const unkeyMaxIdentifier = 512

// unkeyRoutes registers the v2 routes on mux.
func (s *server) unkeyRoutes(mux *http.ServeMux) {
	h := &unkeyV2{srv: s}
	for path, fn := range map[string]func(context.Context, *unkeyCall) (any, error){
		"/v2/ratelimit.limit":          h.limit,
		"/v2/ratelimit.multiLimit":     h.multiLimit,
		"/v2/ratelimit.setOverride":    h.setOverride,
		"/v2/ratelimit.getOverride":    h.getOverride,
		"/v2/ratelimit.listOverrides":  h.listOverrides,
		"/v2/ratelimit.deleteOverride": h.deleteOverride,
	} {
		mux.Handle("POST "+path, limitBody(s.budget, h.serve(fn)))
	}
}

type unkeyV2 struct{ srv *server }

// unkeyCall is one authenticated v2 request.
type unkeyCall struct {
	workspace string
	body      []byte
}

// unkeyError is an error answered in Unkey's shape.
type unkeyError struct {
	status int
	title  string
	typ    string // the last part of the type URL
	detail string
	fields []unkeyFieldError
}

type unkeyFieldError struct {
	Location string `json:"location"`
	Message  string `json:"message"`
}

func (e *unkeyError) Error() string { return e.detail }

func badRequest(detail string, fields ...unkeyFieldError) *unkeyError {
	return &unkeyError{status: http.StatusBadRequest, title: "Bad Request", typ: "application/invalid_input", detail: detail, fields: fields}
}

// serve authenticates the caller from its headers, reads the body (capped
// by limitBody), runs fn and writes its answer or error.
func (h *unkeyV2) serve(fn func(context.Context, *unkeyCall) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requestID := newRequestID()
		defer func() {
			if p := recover(); p != nil {
				h.srv.logger.ErrorContext(r.Context(), "handler panicked", "request_id", requestID, "path", r.URL.Path,
					"panic", p, "stack", string(debug.Stack()))
				writeUnkeyError(w, requestID, toUnkeyError(fmt.Errorf("panic: %v", p)))
			}
		}()
		ws, authErr := h.authenticate(r)
		if authErr != nil {
			if r.ProtoMajor == 1 {
				w.Header().Set("Connection", "close") // do not read the body first
			}
			writeUnkeyError(w, requestID, authErr)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeUnkeyError(w, requestID, bodyError(err))
			return
		}
		data, err := fn(r.Context(), &unkeyCall{workspace: ws, body: body})
		if err != nil {
			ue := toUnkeyError(err)
			if ue.status >= http.StatusInternalServerError {
				// The client gets a generic message; the log has the
				// detail under the same request id.
				h.srv.logger.ErrorContext(r.Context(), "request failed", "request_id", requestID, "path", r.URL.Path, "error", err)
			}
			writeUnkeyError(w, requestID, ue)
			return
		}
		if a, ok := data.(answerAppender); ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.Write(a.appendAnswer(make([]byte, 0, 160), requestID))
			return
		}
		answer := map[string]any{"meta": map[string]string{"requestId": requestID}, "data": data}
		if p, ok := data.(paginated); ok {
			answer["data"], answer["pagination"] = p.data, p.pagination
		}
		writeJSON(w, http.StatusOK, answer)
	})
}

// bodyError answers a body that could not be read: over the cap, past the
// decode budget, or cut short.
func bodyError(err error) *unkeyError {
	switch {
	case errors.Is(err, errDecodeBudget):
		return &unkeyError{status: http.StatusTooManyRequests, title: "Too Many Requests",
			typ: "application/resource_exhausted", detail: "server busy: too many large requests are being read at once; retry shortly"}
	case errors.Is(err, errBodyTooLarge):
		return badRequest(fmt.Sprintf("request body: must be at most %d bytes (1 MiB)", maxRequestBytes))
	}
	return badRequest("request body: could not be read")
}

// authenticate returns the workspace of the request's bearer token (see
// pipeline.Authenticate), or the error Unkey answers.
func (h *unkeyV2) authenticate(r *http.Request) (string, *unkeyError) {
	ws, err := h.srv.pipeline.Authenticate(r.Header.Get("Authorization"))
	switch {
	case err == nil:
		return ws, nil
	case errors.Is(err, pipeline.ErrMissingToken):
		return "", &unkeyError{status: http.StatusUnauthorized, title: "Unauthorized", typ: "authentication/missing",
			detail: "missing bearer token: send an Authorization: Bearer <root key> header"}
	}
	return "", &unkeyError{status: http.StatusUnauthorized, title: "Unauthorized", typ: "authentication/key_not_found",
		detail: "unknown bearer token"}
}

// toUnkeyError answers an error of the pipeline in Unkey's shape, by its
// kind.
func toUnkeyError(err error) *unkeyError {
	var ue *unkeyError
	if errors.As(err, &ue) {
		return ue
	}
	f := pipeline.Classify(err)
	switch f.Kind {
	case pipeline.KindInvalidArgument:
		location := "body." + f.Field
		if strings.HasPrefix(f.Field, "[") {
			location = "body" + f.Field // an entry of multiLimit's array: body[2].cost
		}
		return badRequest(f.Message, unkeyFieldError{Location: location, Message: f.Rule})
	case pipeline.KindNotFound:
		return &unkeyError{status: http.StatusNotFound, title: "Not Found", typ: "data/ratelimit_override_not_found",
			detail: "This override does not exist."}
	case pipeline.KindResourceExhausted:
		return &unkeyError{status: http.StatusTooManyRequests, title: "Too Many Requests", typ: "application/resource_exhausted",
			detail: f.Message}
	}
	return &unkeyError{status: http.StatusInternalServerError, title: "Internal Server Error", typ: "application/unexpected_error",
		detail: "the request could not be completed; the server log has the detail under this requestId"}
}

func writeUnkeyError(w http.ResponseWriter, requestID string, e *unkeyError) {
	body := map[string]any{
		"title":  e.title,
		"detail": e.detail,
		"status": e.status,
		"type":   "https://unkey.com/docs/errors/unkey/" + e.typ,
	}
	if e.status == http.StatusBadRequest {
		fields := e.fields
		if fields == nil {
			fields = []unkeyFieldError{}
		}
		body["errors"] = fields
	}
	writeJSON(w, e.status, map[string]any{"meta": map[string]string{"requestId": requestID}, "error": body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// newRequestID returns an id for meta.requestId.
func newRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// The fields of each body, as Unkey's OpenAPI spec names them.
var (
	limitFields = []string{"namespace", "identifier", "limit", "duration", "cost"}
	setFields   = []string{"namespace", "identifier", "limit", "duration"}
	keyFields   = []string{"namespace", "identifier"}
	listFields  = []string{"namespace", "cursor", "limit"}
)

// unkeyLimitRequest is V2RatelimitLimitRequestBody. Numbers are JSON
// numbers; cost defaults to 1.
type unkeyLimitRequest struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Duration   int64  `json:"duration"`
	Cost       *int64 `json:"cost"`
}

// call converts r. Unkey accepts identifiers of up to 512 characters; one
// over 255 is counted under its digest (see pipeline.CounterIdentifier).
func (r *unkeyLimitRequest) call(workspace string) pipeline.Call {
	cost := int64(1)
	if r.Cost != nil {
		cost = *r.Cost
	}
	return pipeline.Call{Request: ratelimit.Request{Workspace: workspace, Namespace: r.Namespace, Identifier: r.Identifier,
		Limit: r.Limit, Duration: durationMs(r.Duration), Cost: cost}, MaxIdentifier: unkeyMaxIdentifier}
}

// unkeyLimitData is V2RatelimitLimitResponseData.
type unkeyLimitData struct {
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	Reset      int64  `json:"reset"`
	Success    bool   `json:"success"`
	OverrideID string `json:"overrideId,omitempty"`
}

// answerAppender is data that writes its whole answer itself, without
// reflection: the v2 limit call's.
type answerAppender interface {
	appendAnswer(b []byte, requestID string) []byte
}

func (d *unkeyLimitData) appendAnswer(b []byte, requestID string) []byte {
	return appendLimitAnswer(b, requestID, d)
}

func (h *unkeyV2) limit(ctx context.Context, c *unkeyCall) (any, error) {
	var in unkeyLimitRequest
	if !fastLimitRequest(c.body, &in) {
		in = unkeyLimitRequest{}
		if err := strictDecode(c.body, &in, limitFields); err != nil {
			return nil, err
		}
	}
	d, err := h.srv.pipeline.Limit(ctx, in.call(c.workspace))
	if err != nil {
		return nil, err
	}
	return &unkeyLimitData{Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset.UnixMilli(),
		Success: d.Success, OverrideID: d.OverrideID}, nil
}

// unkeyMultiLimitCheck is V2RatelimitMultiLimitCheck.
type unkeyMultiLimitCheck struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	Reset      int64  `json:"reset"`
	Passed     bool   `json:"passed"`
	OverrideID string `json:"overrideId,omitempty"`
}

func (h *unkeyV2) multiLimit(ctx context.Context, c *unkeyCall) (any, error) {
	bound := &ratelimit.ValidationError{Field: "[]", Rule: fmt.Sprintf("must hold 1 to %d limits", ratelimit.MaxBatch)}
	if jsonEntries(c.body, true, ratelimit.MaxBatch) > ratelimit.MaxBatch {
		return nil, bound
	}
	var in []unkeyLimitRequest
	if err := strictDecode(c.body, &in, limitFields); err != nil {
		return nil, err
	}
	calls := make([]pipeline.Call, len(in))
	for i := range in {
		calls[i] = in[i].call(c.workspace)
	}
	m, err := h.srv.pipeline.Multi(ctx, c.workspace, calls)
	var ve *ratelimit.ValidationError
	if errors.As(err, &ve) {
		// The body is a bare array: "limits[2].cost" is "[2].cost" here.
		if ve.Field == "limits" {
			return nil, bound
		}
		return nil, &ratelimit.ValidationError{Field: strings.TrimPrefix(ve.Field, "limits"), Rule: ve.Rule}
	}
	if err != nil {
		return nil, err
	}
	checks := make([]unkeyMultiLimitCheck, len(m.Results))
	for i, d := range m.Results {
		checks[i] = unkeyMultiLimitCheck{Namespace: in[i].Namespace, Identifier: in[i].Identifier, Limit: d.Limit,
			Remaining: d.Remaining, Reset: d.Reset.UnixMilli(), Passed: d.Success, OverrideID: d.OverrideID}
	}
	return map[string]any{"passed": m.Passed, "limits": checks}, nil
}

// unkeyOverrideRequest is the body of the override routes.
type unkeyOverrideRequest struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Duration   int64  `json:"duration"`
}

// unkeyOverride is RatelimitOverride.
type unkeyOverride struct {
	OverrideID string `json:"overrideId"`
	Duration   int64  `json:"duration"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
}

func toUnkeyOverride(o overrides.Override) unkeyOverride {
	return unkeyOverride{OverrideID: o.ID, Duration: o.Duration.Milliseconds(), Identifier: o.Identifier, Limit: o.Limit}
}

func (h *unkeyV2) setOverride(ctx context.Context, c *unkeyCall) (any, error) {
	var in unkeyOverrideRequest
	if err := strictDecode(c.body, &in, setFields); err != nil {
		return nil, err
	}
	o, err := h.srv.pipeline.Overrides().Set(ctx, overrides.Override{Workspace: c.workspace, Namespace: in.Namespace,
		Identifier: in.Identifier, Limit: in.Limit, Duration: durationMs(in.Duration)})
	if err != nil {
		return nil, err
	}
	return map[string]string{"overrideId": o.ID}, nil
}

func (h *unkeyV2) getOverride(ctx context.Context, c *unkeyCall) (any, error) {
	var in unkeyOverrideRequest
	if err := strictDecode(c.body, &in, keyFields); err != nil {
		return nil, err
	}
	o, err := h.srv.pipeline.Overrides().Get(ctx, c.workspace, in.Namespace, in.Identifier)
	if err != nil {
		return nil, err
	}
	return toUnkeyOverride(o), nil
}

func (h *unkeyV2) deleteOverride(ctx context.Context, c *unkeyCall) (any, error) {
	var in unkeyOverrideRequest
	if err := strictDecode(c.body, &in, keyFields); err != nil {
		return nil, err
	}
	if err := h.srv.pipeline.Overrides().Delete(ctx, c.workspace, in.Namespace, in.Identifier); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// listOverrides answers a page of overrides with Unkey's pagination object
// beside data: {meta, data: [...], pagination: {cursor, hasMore}}.
func (h *unkeyV2) listOverrides(ctx context.Context, c *unkeyCall) (any, error) {
	var in struct {
		Namespace string `json:"namespace"`
		Cursor    string `json:"cursor"`
		Limit     int    `json:"limit"`
	}
	if err := strictDecode(c.body, &in, listFields); err != nil {
		return nil, err
	}
	after, err := decodeCursor(in.Cursor)
	if err != nil {
		return nil, err
	}
	page, more, err := h.srv.pipeline.Overrides().List(ctx, c.workspace, in.Namespace, after, in.Limit)
	if err != nil {
		return nil, err
	}
	data := make([]unkeyOverride, len(page))
	for i, o := range page {
		data[i] = toUnkeyOverride(o)
	}
	p := unkeyPagination{HasMore: more}
	if more {
		p.Cursor = encodeCursor(page[len(page)-1].Identifier)
	}
	return paginated{data: data, pagination: p}, nil
}

type unkeyPagination struct {
	Cursor  string `json:"cursor,omitempty"`
	HasMore bool   `json:"hasMore"`
}

// paginated is data that carries a pagination object beside it in the
// answer.
type paginated struct {
	data       any
	pagination unkeyPagination
}

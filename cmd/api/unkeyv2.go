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
	"unicode/utf8"

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
		mux.Handle("POST "+path, h.serve(fn))
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

// serve authenticates the caller from its headers, reads the body (at most
// maxRequestBytes), runs fn and writes its answer or error.
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
		body, release, err := h.readBody(w, r)
		defer release()
		if errors.Is(err, errDecodeBudget) {
			writeUnkeyError(w, requestID, &unkeyError{status: http.StatusTooManyRequests, title: "Too Many Requests",
				typ: "application/resource_exhausted", detail: "server busy: too many large requests are being read at once; retry shortly"})
			return
		}
		if err != nil {
			readErr := badRequest("request body: could not be read")
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				readErr = badRequest(fmt.Sprintf("request body: must be at most %d bytes (1 MiB)", maxRequestBytes))
			}
			writeUnkeyError(w, requestID, readErr)
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

// readBody reads the request body, at most maxRequestBytes, out of the
// decode budget; release gives the budget back once the request is answered.
func (h *unkeyV2) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), err error) {
	l := &lease{budget: h.srv.budget}
	body, err = io.ReadAll(&leasedReader{r: http.MaxBytesReader(w, r.Body, maxRequestBytes), lease: l})
	return body, l.release, err
}

// leasedReader takes what it reads from its lease's budget.
type leasedReader struct {
	r     io.Reader
	lease *lease
}

func (l *leasedReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if leaseErr := l.lease.take(n); leaseErr != nil {
		return 0, leaseErr
	}
	return n, err
}

// authenticate returns the workspace of the request's bearer token.
func (h *unkeyV2) authenticate(r *http.Request) (string, *unkeyError) {
	t := h.srv.tokens
	if len(t) == 0 {
		return openWorkspace, nil
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return "", &unkeyError{status: http.StatusUnauthorized, title: "Unauthorized", typ: "authentication/missing",
			detail: "missing bearer token: send an Authorization: Bearer <root key> header"}
	}
	ws, ok := t.workspace(token)
	if !ok {
		return "", &unkeyError{status: http.StatusUnauthorized, title: "Unauthorized", typ: "authentication/key_not_found",
			detail: "unknown bearer token"}
	}
	return ws, nil
}

// toUnkeyError maps the errors of the limiter and the overrides.
func toUnkeyError(err error) *unkeyError {
	var ue *unkeyError
	var ve *ratelimit.ValidationError
	exhausted, isExhausted := exhaustedMessage(err)
	switch {
	case errors.As(err, &ue):
		return ue
	case errors.As(err, &ve):
		location := "body." + ve.Field
		if strings.HasPrefix(ve.Field, "[") {
			location = "body" + ve.Field // an entry of multiLimit's array: body[2].cost
		}
		return badRequest(ve.Error(), unkeyFieldError{Location: location, Message: ve.Rule})
	case errors.Is(err, overrides.ErrNotFound):
		return &unkeyError{status: http.StatusNotFound, title: "Not Found", typ: "data/ratelimit_override_not_found",
			detail: "This override does not exist."}
	case isExhausted:
		return &unkeyError{status: http.StatusTooManyRequests, title: "Too Many Requests", typ: "application/resource_exhausted",
			detail: exhausted}
	default:
		return &unkeyError{status: http.StatusInternalServerError, title: "Internal Server Error", typ: "application/unexpected_error",
			detail: "the request could not be completed; the server log has the detail under this requestId"}
	}
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

// request converts r, checking what the limiter's own validation does not:
// Unkey's 512-character identifiers. The request's identifier is the one it
// is counted under (see counterIdentifier); overrides match r.Identifier.
func (r *unkeyLimitRequest) request(workspace string) (ratelimit.Request, error) {
	cost := int64(1)
	if r.Cost != nil {
		cost = *r.Cost
	}
	req := ratelimit.Request{Workspace: workspace, Namespace: r.Namespace, Identifier: r.Identifier,
		Limit: r.Limit, Duration: durationMs(r.Duration), Cost: cost}
	if n := utf8.RuneCountInString(r.Identifier); n > ratelimit.MaxNameLength {
		if n > unkeyMaxIdentifier || !utf8.ValidString(r.Identifier) || strings.ContainsFunc(r.Identifier, isControl) {
			return ratelimit.Request{}, &ratelimit.ValidationError{Field: "identifier",
				Rule: fmt.Sprintf("must be 1 to %d characters of valid UTF-8 without control characters", unkeyMaxIdentifier)}
		}
		req.Identifier = counterIdentifier(r.Identifier) // what is validated below: the rest of the request
	}
	if err := req.Validate(); err != nil {
		return ratelimit.Request{}, err
	}
	req.Identifier = counterIdentifier(r.Identifier)
	return req, nil
}

// isControl reports a C0 or C1 control character, which no name may hold.
func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }

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
	req, err := in.request(c.workspace)
	if err != nil {
		return nil, err
	}
	overrideID := h.applyOverride(&req, in.Identifier)
	resp, err := decide(ctx, h.srv.limiter, &req)
	if err != nil {
		return nil, err
	}
	h.srv.metrics.decision("Limit", resp.Success)
	return &unkeyLimitData{Limit: resp.Limit, Remaining: resp.Remaining, Reset: resp.Reset.UnixMilli(),
		Success: resp.Success, OverrideID: overrideID}, nil
}

// applyOverride replaces req's limit and duration by those of the override
// that matches identifier (as the caller sent it), and returns its id.
func (h *unkeyV2) applyOverride(req *ratelimit.Request, identifier string) string {
	o, ok := h.srv.overrides.Lookup(req.Workspace, req.Namespace, identifier)
	if !ok {
		return ""
	}
	req.Limit, req.Duration = o.Limit, o.Duration
	return o.ID
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
	if jsonEntries(c.body, true, ratelimit.MaxBatch) > ratelimit.MaxBatch {
		return nil, &ratelimit.ValidationError{Field: "[]", Rule: fmt.Sprintf("must hold 1 to %d limits", ratelimit.MaxBatch)}
	}
	var in []unkeyLimitRequest
	if err := strictDecode(c.body, &in, limitFields); err != nil {
		return nil, err
	}
	if len(in) == 0 || len(in) > ratelimit.MaxBatch {
		return nil, &ratelimit.ValidationError{Field: "[]", Rule: fmt.Sprintf("must hold 1 to %d limits", ratelimit.MaxBatch)}
	}
	reqs := make([]ratelimit.Request, len(in))
	ids := make([]string, len(in))
	blocked := make([]bool, len(in))
	for i := range in {
		req, err := in[i].request(c.workspace)
		if err != nil {
			var ve *ratelimit.ValidationError
			if errors.As(err, &ve) {
				return nil, &ratelimit.ValidationError{Field: fmt.Sprintf("[%d].%s", i, ve.Field), Rule: ve.Rule}
			}
			return nil, err
		}
		ids[i] = h.applyOverride(&req, in[i].Identifier)
		blocked[i] = req.Limit == 0
		reqs[i] = req
	}
	leave, err := h.srv.batches.enter(ctx, c.workspace, len(reqs))
	if err != nil {
		return nil, err
	}
	defer leave()
	resp, err := multiLimit(ctx, h.srv.limiter, reqs, blocked)
	if err != nil {
		return nil, err
	}
	h.srv.metrics.decision("MultiLimit", resp.Passed)
	checks := make([]unkeyMultiLimitCheck, len(resp.Results))
	for i, r := range resp.Results {
		checks[i] = unkeyMultiLimitCheck{Namespace: in[i].Namespace, Identifier: in[i].Identifier, Limit: r.Limit,
			Remaining: r.Remaining, Reset: r.Reset.UnixMilli(), Passed: r.Success, OverrideID: ids[i]}
	}
	return map[string]any{"passed": resp.Passed, "limits": checks}, nil
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
	o, err := h.srv.overrides.Set(ctx, overrides.Override{Workspace: c.workspace, Namespace: in.Namespace,
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
	o, err := h.srv.overrides.Get(ctx, c.workspace, in.Namespace, in.Identifier)
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
	if err := h.srv.overrides.Delete(ctx, c.workspace, in.Namespace, in.Identifier); err != nil {
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
	page, more, err := h.srv.overrides.List(ctx, c.workspace, in.Namespace, after, in.Limit)
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

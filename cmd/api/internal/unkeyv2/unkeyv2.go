// Package unkeyv2 is the adapter of Unkey's v2 ratelimit API onto the
// request pipeline, on the same port as the Connect API, so that callers
// of Unkey's SDKs (@unkey/ratelimit, @unkey/api) switch by changing their
// base URL. Bodies and errors are shaped as Unkey's OpenAPI spec gives
// them: {meta: {requestId}, data: …} on success, {meta, error: {title,
// detail, status, type}} (with errors: [{location, message}] for 400) on
// failure. Bodies are decoded strictly, as the spec describes every body
// (additionalProperties: false). The bearer token maps to a principal (a
// workspace and its permissions) as for the Connect API.
package unkeyv2

import (
	"context"
	_ "embed"
	"io"
	"net/http"
	"strings"

	"google.golang.org/grpc"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
)

// Handler serves the v2 routes on a layer's pipeline.
type Handler struct {
	layer    *transport.Layer
	pipeline *pipeline.Pipeline
}

// New returns the v2 routes deciding on p, behind l.
func New(l *transport.Layer, p *pipeline.Pipeline) *Handler { return &Handler{layer: l, pipeline: p} }

// request is one authenticated v2 request; its principal is in the request's
// context.
type request struct {
	body []byte
	// header is the answer's: a route may add fields to it.
	header http.Header
	// requestID is the answer's meta.requestId, which a change's audit
	// entry records.
	requestID string
}

// routes are the v2 routes, each served on POST, in the order Paths
// lists them.
func (h *Handler) routes() []route {
	return []route{
		{"/v2/ratelimit.limit", h.limit},
		{"/v2/ratelimit.multiLimit", h.multiLimit},
		{"/v2/ratelimit.settle", h.settle},
		{"/v2/ratelimit.acquire", h.acquire},
		{"/v2/ratelimit.release", h.release},
		{"/v2/ratelimit.extend", h.extend},
		{"/v2/ratelimit.setOverride", h.setOverride},
		{"/v2/ratelimit.getOverride", h.getOverride},
		{"/v2/ratelimit.listOverrides", h.listOverrides},
		{"/v2/ratelimit.deleteOverride", h.deleteOverride},
	}
}

// route is one v2 route: its path and what serves it.
type route struct {
	path string
	fn   func(context.Context, *request) (any, error)
}

// Paths returns the paths of the v2 routes, each served on POST, for the
// answer to a path the server does not serve.
func (h *Handler) Paths() []string {
	var paths []string
	for _, r := range h.routes() {
		paths = append(paths, r.path)
	}
	return paths
}

// OpenAPI is the OpenAPI 3.1 document of the v2 routes, served at
// OpenAPIPath: their bodies, answers and errors as the handlers write them
// (a test of the daemon's checks every answer against it).
//
//go:embed openapi.yaml
var OpenAPI []byte

// OpenAPIPath is where the v2 routes' OpenAPI document is served, on GET,
// to anyone: it describes the API, and holds nothing of a workspace.
const OpenAPIPath = "/v2/openapi.yaml"

// Register serves the v2 routes on mux behind the layer, and their
// OpenAPI document.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET "+OpenAPIPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(OpenAPI)
	})
	render := func(w http.ResponseWriter, r *http.Request, err error) { h.fail(w, r, "", err) }
	for _, rt := range h.routes() {
		mux.Handle("POST "+rt.path, h.layer.Route("v2", render, h.serve(rt.fn), strings.TrimPrefix(rt.path, "/v2/")))
	}
}

// Services returns none: Unkey's v2 API is JSON over HTTP only.
func (h *Handler) Services() []string { return nil }

// Routes names the v2 routes and their OpenAPI document, for the answer
// to a path the server does not serve.
func (h *Handler) Routes() string {
	return "POST " + strings.Join(h.Paths(), ", ") + ", GET " + OpenAPIPath
}

// RegisterGRPC registers nothing: Unkey's v2 API is JSON over HTTP only.
func (h *Handler) RegisterGRPC(*grpc.Server) {}

// Codecs returns none: the v2 routes read their JSON themselves.
func (h *Handler) Codecs() transport.Codecs { return transport.Codecs{} }

// serve reads the body (capped by the layer), runs fn and writes its
// answer or failure under a new request id.
func (h *Handler) serve(fn func(context.Context, *request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requestID := transport.NewRequestID()
		if err := transport.CheckJSONContentType(r); err != nil {
			h.fail(w, r, requestID, err)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			h.fail(w, r, requestID, err)
			return
		}
		data, err := fn(r.Context(), &request{body: body, header: w.Header(), requestID: requestID})
		if err != nil {
			h.fail(w, r, requestID, err)
			return
		}
		if a, ok := data.(*limitData); ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.Write(appendSuccess(make([]byte, 0, 256), a, requestID))
			return
		}
		answer := success{Data: data, Meta: meta{RequestID: requestID}}
		if p, ok := data.(paginated); ok {
			answer.Data, answer.Pagination = p.data, &p.pagination
		}
		writeJSON(w, http.StatusOK, answer)
	})
}

// success is the body of every answer but a failure's.
type success struct {
	Data       any         `json:"data"`
	Pagination *pagination `json:"pagination,omitempty"`
	Meta       meta        `json:"meta"`
}

type meta struct {
	RequestID string `json:"requestId"`
}

// pagination is Unkey's pagination object, beside data.
type pagination struct {
	Cursor  string `json:"cursor,omitempty"`
	HasMore bool   `json:"hasMore"`
}

// paginated is data that carries a pagination object beside it in the
// answer.
type paginated struct {
	data       any
	pagination pagination
}

// Package dashboard serves /dashboard: one page, with no build step, that
// shows what the API's analytics, overrides and status calls answer. The
// page holds no data and needs no key; its script calls the API with the
// key the user types in (kept in the tab's session storage), so it sees
// exactly what that key may read, and an open server's data without one.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"

	"google.golang.org/grpc"

	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
)

//go:embed static
var static embed.FS

// Page is the dashboard, served beside the API's protocols.
type Page struct{}

// New returns the dashboard.
func New() Page { return Page{} }

// Register serves the page at /dashboard and its script and style beside
// it.
func (Page) Register(mux *http.ServeMux) {
	files, _ := fs.Sub(static, "static")
	fileServer := http.StripPrefix("/dashboard/", http.FileServerFS(files))
	mux.HandleFunc("GET /dashboard", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/dashboard/", http.StatusMovedPermanently)
	})
	mux.Handle("GET /dashboard/", secure(fileServer))
}

// Services returns none: the page is HTTP only.
func (Page) Services() []string { return nil }

// Routes names the page.
func (Page) Routes() string { return "GET /dashboard" }

// RegisterGRPC registers nothing: the page is HTTP only.
func (Page) RegisterGRPC(*grpc.Server) {}

// Codecs returns none: the page decodes no messages.
func (Page) Codecs() transport.Codecs { return transport.Codecs{} }

// secure adds the headers that keep the page to itself: its own script and
// style only, never in a frame, no content sniffing.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}
